//! Five-field cron schedules, written as Kubernetes CronJob `spec.schedule` writes them, and the
//! instants at which they fire in an IANA time zone (CronJob's `spec.timeZone`).
//!
//! # Grammar
//!
//! `minute hour day-of-month month day-of-week`, separated by spaces or tabs. Ranges: minute 0-59,
//! hour 0-23, day-of-month 1-31, month 1-12 or `JAN`-`DEC`, day-of-week 0-7 (0 and 7 are Sunday)
//! or `SUN`-`SAT`; names are case-insensitive. A field is a comma-separated list of items, each
//! `*`, `N` or `A-B` (with `A <= B`), optionally followed by a step `/S` (`S >= 1`); `A/S` means
//! `A-max/S`, where max is 6 (Saturday) in the day-of-week field. `?` means `*` in the two day
//! fields. The macros `@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight` and
//! `@hourly` stand for their usual five fields. Refused: `@reboot`, `@every`, a `TZ=` or
//! `CRON_TZ=` prefix (CronJob takes the zone from `spec.timeZone`), expressions longer than
//! [`MAX_EXPRESSION_BYTES`], and expressions that can never fire, such as `0 0 30 2 *`.
//!
//! Days follow Vixie cron: when both day fields are restricted (the field does not start with `*`
//! or `?`), a day matches if either field matches; otherwise both must match.
//!
//! # Time zones and daylight saving time
//!
//! The fields are matched against the civil (wall-clock) time in the zone, and every scheduled
//! wall-clock minute fires at exactly one instant: the moment the zone's wall clock first reaches
//! or passes it. So:
//!
//! - an ordinary wall-clock time fires at its only instant;
//! - a time skipped by a forward transition (02:30 on 2026-03-08 in America/New_York) fires at
//!   the transition, the first instant after the gap (03:00 EDT, 07:00 UTC). All scheduled times
//!   inside one gap, and a time scheduled exactly at the gap's end, collapse into that one
//!   firing: a schedule never fires twice at the same instant;
//! - a time repeated by a backward transition (01:30 on 2026-11-01 in America/New_York) fires at
//!   its first occurrence (EDT, 05:30 UTC) only; `0 * * * *` fires at 01:00 EDT and then at
//!   02:00 EST, not at the second 01:00.
//!
//! Nothing assumes transitions of whole hours or at whole hours (Australia/Lord_Howe moves by 30
//! minutes, Antarctica/Troll by two hours, Pacific/Apia once skipped a whole day).

use jiff::civil::{Date, DateTime};
use jiff::tz::{AmbiguousOffset, TimeZone};
use jiff::{Span, Timestamp};

/// Longest accepted expression, in bytes.
pub const MAX_EXPRESSION_BYTES: usize = 256;

/// How far [`Cron::next_after`] looks ahead, in years (plus a couple of days, so that a
/// February 29 schedule finds the leap day across a skipped leap year such as 2100).
const SEARCH_YEARS: i16 = 8;

/// A parsed schedule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cron {
    /// Bit `m` set: fires at minute `m`.
    minutes: u64,
    /// Bit `h` set: fires in hour `h`.
    hours: u32,
    /// Bit `d` set (1-31): fires on day `d` of the month.
    days_of_month: u32,
    /// Bit `m` set (1-12): fires in month `m`.
    months: u16,
    /// Bit `d` set (0-6, 0 is Sunday): fires on that weekday.
    days_of_week: u8,
    /// The day-of-month field did not start with `*` or `?`.
    dom_restricted: bool,
    /// The day-of-week field did not start with `*` or `?`.
    dow_restricted: bool,
}

/// Why a schedule or time zone was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CronError {
    /// The expression holds nothing but whitespace.
    #[error(
        "the schedule is empty; write 5 fields (minute hour day-of-month month day-of-week) or a macro like @daily"
    )]
    Empty,
    /// The expression is longer than [`MAX_EXPRESSION_BYTES`].
    #[error("the schedule is {len} bytes long; at most {MAX_EXPRESSION_BYTES} are accepted")]
    TooLong {
        /// Its length in bytes.
        len: usize,
    },
    /// The expression does not have five fields.
    #[error("expected 5 fields (minute hour day-of-month month day-of-week), found {found}")]
    FieldCount {
        /// How many fields it has.
        found: usize,
    },
    /// The expression starts with `TZ=` or `CRON_TZ=`.
    #[error("TZ= and CRON_TZ= are not accepted in the schedule; set spec.timeZone")]
    TimeZonePrefix,
    /// `@every` or `@reboot`.
    #[error("@every and @reboot are not supported; write a 5-field schedule")]
    UnsupportedMacro,
    /// An `@` word that is no macro.
    #[error("unknown macro {name:?}; use @yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly")]
    UnknownMacro {
        /// The word as written.
        name: String,
    },
    /// A macro followed by more words.
    #[error("{name} stands alone; remove what follows it")]
    MacroWithFields {
        /// The macro as written.
        name: String,
    },
    /// An empty list item, as in `1,,2` or `1,`.
    #[error("{field} field: empty list item; remove the stray comma")]
    EmptyItem {
        /// The field's name.
        field: &'static str,
    },
    /// A value that is neither a number nor a name the field knows.
    #[error("{field} field: {text:?} is not a {expected}")]
    NotAValue {
        /// The field's name.
        field: &'static str,
        /// The value as written.
        text: String,
        /// What the field accepts.
        expected: &'static str,
    },
    /// A number outside the field's range.
    #[error("{field} field: {value} is out of range {min}-{max}")]
    OutOfRange {
        /// The field's name.
        field: &'static str,
        /// The number as written.
        value: String,
        /// The field's smallest value.
        min: u8,
        /// The field's largest value.
        max: u8,
    },
    /// A range whose start is after its end.
    #[error("{field} field: range {start}-{end} runs backwards; write it as {start}-{max},{min}-{end}")]
    ReversedRange {
        /// The field's name.
        field: &'static str,
        /// The range's start.
        start: u8,
        /// The range's end.
        end: u8,
        /// The field's smallest value.
        min: u8,
        /// The field's largest value.
        max: u8,
    },
    /// A step that is not a whole number of at least 1.
    #[error("{field} field: step {text:?} must be a whole number of at least 1")]
    BadStep {
        /// The field's name.
        field: &'static str,
        /// The step as written.
        text: String,
    },
    /// `?` outside the two day fields.
    #[error("{field} field: ? is only allowed in day-of-month and day-of-week; write *")]
    QuestionMark {
        /// The field's name.
        field: &'static str,
    },
    /// No selected month holds a selected day of the month, and the day of the week is not
    /// restricted.
    #[error("the schedule never fires ({detail})")]
    NeverFires {
        /// Which days in which months, e.g. `day 30 of February`.
        detail: String,
    },
    /// An empty time zone name.
    #[error("the time zone must be an IANA name like \"Europe/Berlin\", or absent for UTC; it is empty")]
    EmptyTimeZone,
    /// A time zone that is not shaped like an IANA name, e.g. a POSIX TZ string.
    #[error(
        "time zone {name:?} is not an IANA name (POSIX TZ strings are not accepted); write one like \"Europe/Berlin\""
    )]
    NotIanaName {
        /// The name as written.
        name: String,
    },
    /// A time zone name the time zone database does not know.
    #[error("unknown time zone {name:?}")]
    UnknownTimeZone {
        /// The name as written.
        name: String,
    },
}

/// The IANA time zone `name` (as CronJob's `timeZone`), or UTC for `None`. Refuses names jiff's
/// database does not know, and refuses the POSIX-TZ-string forms; "UTC" and "Etc/UTC" work.
pub fn time_zone(name: Option<&str>) -> Result<TimeZone, CronError> {
    let Some(name) = name else { return Ok(TimeZone::UTC) };
    if name.is_empty() {
        return Err(CronError::EmptyTimeZone);
    }
    let iana_shaped = !name.starts_with('/')
        && !name.contains("..")
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b"/_-+".contains(&b));
    if !iana_shaped {
        return Err(CronError::NotIanaName { name: name.to_owned() });
    }
    TimeZone::get(name).map_err(|_| CronError::UnknownTimeZone { name: name.to_owned() })
}

impl Cron {
    /// Parses a 5-field expression (or one of the macros); see the module documentation.
    pub fn parse(expression: &str) -> Result<Cron, CronError> {
        if expression.len() > MAX_EXPRESSION_BYTES {
            return Err(CronError::TooLong { len: expression.len() });
        }
        let mut text = expression.trim_ascii();
        if text.is_empty() {
            return Err(CronError::Empty);
        }
        if ["TZ=", "CRON_TZ="].iter().any(|p| text.get(..p.len()).is_some_and(|s| s.eq_ignore_ascii_case(p))) {
            return Err(CronError::TimeZonePrefix);
        }
        if text.starts_with('@') {
            text = expand_macro(text)?;
        }
        let fields: Vec<&str> = text.split_ascii_whitespace().collect();
        let [minute, hour, day_of_month, month, day_of_week] = fields[..] else {
            return Err(CronError::FieldCount { found: fields.len() });
        };
        let cron = Cron {
            minutes: MINUTE.parse(minute)?,
            hours: narrow(HOUR.parse(hour)?),
            days_of_month: narrow(DAY_OF_MONTH.parse(day_of_month)?),
            months: narrow(MONTH.parse(month)?),
            days_of_week: fold_sunday(DAY_OF_WEEK.parse(day_of_week)?),
            dom_restricted: restricts(day_of_month),
            dow_restricted: restricts(day_of_week),
        };
        cron.check_can_fire()?;
        Ok(cron)
    }

    /// The first instant strictly after `after` at which the schedule fires in `zone`; None only
    /// if it never fires within 8 years (parse already refuses expressions that can never fire).
    ///
    /// Scans civil dates from the day before `after`'s local date, skipping months and days the
    /// schedule excludes; on a matching day it binary-searches the hours and then the minutes.
    /// That search, and returning the day's first firing after `after` as the overall first, rely
    /// on the mapping from scheduled wall-clock times to instants (see the module documentation)
    /// never going backwards: later wall-clock times fire at the same or later instants.
    pub fn next_after(&self, after: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
        let hours: Vec<i8> = members(self.hours.into()).collect();
        let minutes: Vec<i8> = members(self.minutes).collect();
        let mut date = zone.to_datetime(after).date().yesterday().ok()?;
        let end = date.checked_add(Span::new().years(SEARCH_YEARS).days(2)).unwrap_or(Date::MAX);
        while date <= end {
            if self.day_matches(date)
                && let Some(instant) = first_on_day(date, &hours, &minutes, after, zone)
            {
                return Some(instant);
            }
            date = self.next_candidate_day(date)?;
        }
        None
    }

    /// The day after `date`, or the first day of the next month if that month is excluded.
    fn next_candidate_day(&self, date: Date) -> Option<Date> {
        let mut next = date.tomorrow().ok()?;
        while self.months & 1 << next.month() == 0 {
            next = next.last_of_month().tomorrow().ok()?;
        }
        Some(next)
    }

    /// Whether the schedule fires on `date` (its month included), by the Vixie day rule.
    fn day_matches(&self, date: Date) -> bool {
        let month = self.months & 1 << date.month() != 0;
        let dom = self.days_of_month & 1 << date.day() != 0;
        let dow = self.days_of_week & 1 << date.weekday().to_sunday_zero_offset() != 0;
        month && if self.dom_restricted && self.dow_restricted { dom || dow } else { dom && dow }
    }

    /// Refuses a schedule whose days of the month fit in none of its months, unless the day of
    /// the week is restricted (then any matching weekday fires).
    fn check_can_fire(&self) -> Result<(), CronError> {
        let months: Vec<(u8, &str)> = (1..=12).zip(MONTH_NAMES).filter(|&(m, _)| self.months & 1 << m != 0).collect();
        if self.dow_restricted || months.iter().any(|&(m, _)| self.days_of_month & days_in_longest(m) != 0) {
            return Ok(());
        }
        let days: Vec<String> = members(self.days_of_month.into()).map(|d| d.to_string()).collect();
        let noun = if days.len() == 1 { "day" } else { "days" };
        let names = months.iter().map(|(_, name)| (*name).to_owned()).collect();
        Err(CronError::NeverFires { detail: format!("{noun} {} of {}", join_or(days), join_or(names)) })
    }
}

/// The macro at the start of `text`, expanded to its five fields.
fn expand_macro(text: &str) -> Result<&'static str, CronError> {
    let mut words = text.split_ascii_whitespace();
    let name = words.next().unwrap_or_default();
    let fields = match name.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        "@every" | "@reboot" => return Err(CronError::UnsupportedMacro),
        _ => return Err(CronError::UnknownMacro { name: name.to_owned() }),
    };
    match words.next() {
        Some(_) => Err(CronError::MacroWithFields { name: name.to_owned() }),
        None => Ok(fields),
    }
}

/// The instant at which the scheduled wall-clock time `civil` fires in `zone`: its only instant,
/// the earlier one in a fold, or the end of the gap (the transition) in a gap.
fn fire_instant(zone: &TimeZone, civil: DateTime) -> Option<Timestamp> {
    let ambiguous = zone.to_ambiguous_timestamp(civil);
    match ambiguous.offset() {
        AmbiguousOffset::Unambiguous { .. } | AmbiguousOffset::Fold { .. } => ambiguous.earlier().ok(),
        AmbiguousOffset::Gap { after, .. } => {
            // Read with the offset after the gap, `civil` lies before the transition, and the
            // transition is the next one: no zone changes offset twice within one gap.
            let before_transition = after.to_timestamp(civil).ok()?;
            zone.following(before_transition).next().map(|transition| transition.timestamp())
        }
    }
}

/// The first firing on `date` strictly after `after`, if any.
fn first_on_day(date: Date, hours: &[i8], minutes: &[i8], after: Timestamp, zone: &TimeZone) -> Option<Timestamp> {
    let fires = |hour, minute| fire_instant(zone, date.at(hour, minute, 0, 0));
    let passed = |hour, minute| fires(hour, minute).is_some_and(|instant| instant <= after);
    let &last_minute = minutes.last()?;
    let &hour = hours.get(hours.partition_point(|&hour| passed(hour, last_minute)))?;
    let &minute = minutes.get(minutes.partition_point(|&minute| passed(hour, minute)))?;
    fires(hour, minute)
}

/// The set bits of `bits`, lowest first.
fn members(bits: u64) -> impl Iterator<Item = i8> {
    (0..64).filter(move |&bit| bits & 1 << bit != 0)
}

/// `bits` in a narrower type; a field's bits always fit the type chosen for it.
fn narrow<T: TryFrom<u64, Error: std::fmt::Debug>>(bits: u64) -> T {
    T::try_from(bits).expect("a field's largest value fits the bitset chosen for it")
}

/// Day-of-week bits 0-7 with 7 folded onto 0 (both are Sunday).
fn fold_sunday(bits: u64) -> u8 {
    narrow::<u8>(bits & 0x7f) | u8::from(bits & 1 << 7 != 0)
}

/// Whether a day field restricts the days (Vixie: it does not start with `*` or `?`).
fn restricts(field: &str) -> bool {
    !field.starts_with(['*', '?'])
}

/// Bits 1 to the length of `month` in its longest (leap) year.
fn days_in_longest(month: u8) -> u32 {
    let length = match month {
        2 => 29,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    };
    u32::MAX >> (31 - length) & !1
}

/// `a`, `a or b`, `a, b or c`.
fn join_or(mut items: Vec<String>) -> String {
    match items.pop() {
        Some(last) if !items.is_empty() => format!("{} or {last}", items.join(", ")),
        last => last.unwrap_or_default(),
    }
}

/// The month names, for messages.
const MONTH_NAMES: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// One of the five fields: its range and the names it accepts.
struct Field {
    /// The name used in messages.
    name: &'static str,
    /// The smallest value.
    min: u8,
    /// The largest value.
    max: u8,
    /// The largest value of `*` and of `A/S` (the day of the week stops at 6, Saturday).
    star_max: u8,
    /// Names standing for `min`, `min + 1`, ...
    names: &'static [&'static str],
    /// What a value may be, for messages.
    expected: &'static str,
    /// Whether `?` is accepted.
    question: bool,
}

/// The minute field.
const MINUTE: Field =
    Field { name: "minute", min: 0, max: 59, star_max: 59, names: &[], expected: "number", question: false };
/// The hour field.
const HOUR: Field =
    Field { name: "hour", min: 0, max: 23, star_max: 23, names: &[], expected: "number", question: false };
/// The day-of-month field.
const DAY_OF_MONTH: Field =
    Field { name: "day-of-month", min: 1, max: 31, star_max: 31, names: &[], expected: "number", question: true };
/// The month field.
const MONTH: Field = Field {
    name: "month",
    min: 1,
    max: 12,
    star_max: 12,
    names: &["JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"],
    expected: "number or month name (JAN-DEC)",
    question: false,
};
/// The day-of-week field.
const DAY_OF_WEEK: Field = Field {
    name: "day-of-week",
    min: 0,
    max: 7,
    star_max: 6,
    names: &["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"],
    expected: "number or day name (SUN-SAT)",
    question: true,
};

impl Field {
    /// The bits selected by a comma-separated list of items.
    fn parse(&self, text: &str) -> Result<u64, CronError> {
        text.split(',').try_fold(0, |bits, item| Ok(bits | self.parse_item(item)?))
    }

    /// The bits selected by one item: `*`, `?`, `N` or `A-B`, each with an optional `/S`.
    fn parse_item(&self, item: &str) -> Result<u64, CronError> {
        if item.is_empty() {
            return Err(CronError::EmptyItem { field: self.name });
        }
        let (range, step) = match item.split_once('/') {
            Some((range, step)) => (range, Some(self.parse_step(step)?)),
            None => (item, None),
        };
        let (start, end) = match (range, range.split_once('-')) {
            ("*", _) => (self.min, self.star_max),
            ("?", _) if self.question => (self.min, self.star_max),
            ("?", _) => return Err(CronError::QuestionMark { field: self.name }),
            (_, Some((start, end))) => self.parse_range(start, end)?,
            (_, None) => {
                let start = self.parse_value(range)?;
                (start, if step.is_some() { self.star_max.max(start) } else { start })
            }
        };
        let values = (start..=end).step_by(step.unwrap_or(1));
        Ok(values.fold(0, |bits, value| bits | 1 << value))
    }

    /// The bounds of `start-end`.
    fn parse_range(&self, start: &str, end: &str) -> Result<(u8, u8), CronError> {
        let (start, end) = (self.parse_value(start)?, self.parse_value(end)?);
        if start > end {
            return Err(CronError::ReversedRange { field: self.name, start, end, min: self.min, max: self.max });
        }
        Ok((start, end))
    }

    /// A step: a whole number of at least 1.
    fn parse_step(&self, text: &str) -> Result<usize, CronError> {
        let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
        match text.parse::<usize>() {
            Ok(step) if digits && step >= 1 => Ok(step),
            _ => Err(CronError::BadStep { field: self.name, text: text.to_owned() }),
        }
    }

    /// A number in the field's range, or one of its names.
    fn parse_value(&self, text: &str) -> Result<u8, CronError> {
        if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
            return match text.parse::<u8>() {
                Ok(value) if (self.min..=self.max).contains(&value) => Ok(value),
                _ => Err(CronError::OutOfRange {
                    field: self.name,
                    value: text.to_owned(),
                    min: self.min,
                    max: self.max,
                }),
            };
        }
        match self.names.iter().zip(self.min..).find(|(name, _)| name.eq_ignore_ascii_case(text)) {
            Some((_, value)) => Ok(value),
            None => Err(CronError::NotAValue { field: self.name, text: text.to_owned(), expected: self.expected }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use jiff::{SignedDuration, Zoned};

    /// An instant written as an RFC 9557 zoned datetime; jiff rejects an offset the zone does not
    /// have at that wall-clock time, so these literals are checked against the database.
    fn at(text: &str) -> Timestamp {
        text.parse::<Zoned>().unwrap().timestamp()
    }

    /// An instant written in UTC.
    fn utc(text: &str) -> Timestamp {
        text.parse().unwrap()
    }

    fn zone(name: &str) -> TimeZone {
        time_zone(Some(name)).unwrap()
    }

    fn cron(expression: &str) -> Cron {
        Cron::parse(expression).unwrap()
    }

    fn error(expression: &str) -> String {
        Cron::parse(expression).unwrap_err().to_string()
    }

    /// The firings of `expression` in `zone_name` after `after`, `count` of them.
    fn firings(expression: &str, zone_name: &str, after: Timestamp, count: usize) -> Vec<Timestamp> {
        let (cron, zone) = (cron(expression), zone(zone_name));
        std::iter::successors(cron.next_after(after, &zone), |&t| cron.next_after(t, &zone)).take(count).collect()
    }

    fn bits(values: &[u8]) -> u64 {
        values.iter().fold(0, |bits, &value| bits | 1 << value)
    }

    #[test]
    fn parses_every_item_form() {
        let c = cron("5 */6 1-3 */4 1-5/2");
        assert_eq!(c.minutes, bits(&[5]));
        assert_eq!(u64::from(c.hours), bits(&[0, 6, 12, 18]));
        assert_eq!(u64::from(c.days_of_month), bits(&[1, 2, 3]));
        assert_eq!(u64::from(c.months), bits(&[1, 5, 9]));
        assert_eq!(u64::from(c.days_of_week), bits(&[1, 3, 5]));
        let c = cron("10/20 22/1 28/2 11/1 3/2");
        assert_eq!(c.minutes, bits(&[10, 30, 50]));
        assert_eq!(u64::from(c.hours), bits(&[22, 23]));
        assert_eq!(u64::from(c.days_of_month), bits(&[28, 30]));
        assert_eq!(u64::from(c.months), bits(&[11, 12]));
        assert_eq!(u64::from(c.days_of_week), bits(&[3, 5]), "A/S stops at Saturday");
        let c = cron("0,15,40-42,50-59/5 * * * *");
        assert_eq!(c.minutes, bits(&[0, 15, 40, 41, 42, 50, 55]));
        assert_eq!(cron("* * * * *").minutes, (1 << 60) - 1);
        assert_eq!(cron("*/100 * * * *").minutes, 1, "a step beyond the range keeps the start");
    }

    #[test]
    fn parses_names_case_insensitively_and_sunday_as_0_or_7() {
        assert_eq!(cron("0 0 * jan-Mar,DEC mon-FRI"), cron("0 0 * 1-3,12 1-5"));
        assert_eq!(cron("0 0 * feb/3 sun"), cron("0 0 * 2,5,8,11 0"));
        assert_eq!(cron("0 0 * * 7"), cron("0 0 * * 0"));
        assert_eq!(u64::from(cron("0 0 * * 5-7").days_of_week), bits(&[0, 5, 6]));
        assert_eq!(u64::from(cron("0 0 * * */2").days_of_week), bits(&[0, 2, 4, 6]));
        assert_eq!(u64::from(cron("0 0 * * *").days_of_week), 0x7f);
    }

    #[test]
    fn parses_macros_question_marks_and_whitespace() {
        assert_eq!(cron("@yearly"), cron("0 0 1 1 *"));
        assert_eq!(cron("@annually"), cron("0 0 1 1 *"));
        assert_eq!(cron("@monthly"), cron("0 0 1 * *"));
        assert_eq!(cron("@weekly"), cron("0 0 * * 0"));
        assert_eq!(cron("@daily"), cron("0 0 * * *"));
        assert_eq!(cron(" @midnight\t"), cron("0 0 * * *"));
        assert_eq!(cron("@hourly"), cron("0 * * * *"));
        assert_eq!(cron("0 0 ? * 1"), cron("0 0 * * 1"));
        assert_eq!(cron("0 0 1 * ?"), cron("0 0 1 * *"));
        assert_eq!(cron(" \t0  9\t\t* *   1-5 \n"), cron("0 9 * * 1-5"));
    }

    #[test]
    fn records_which_day_fields_restrict() {
        let c = cron("0 0 13 * 5");
        assert!(c.dom_restricted && c.dow_restricted);
        let c = cron("0 0 */2 * ?");
        assert!(!c.dom_restricted && !c.dow_restricted);
        assert!(cron("@weekly").dow_restricted && !cron("@weekly").dom_restricted);
    }

    #[test]
    fn refuses_malformed_expressions_with_what_to_fix() {
        assert_eq!(error("61 * * * *"), "minute field: 61 is out of range 0-59");
        assert_eq!(error("0 24 * * *"), "hour field: 24 is out of range 0-23");
        assert_eq!(error("0 0 0 * *"), "day-of-month field: 0 is out of range 1-31");
        assert_eq!(error("0 0 * 13 *"), "month field: 13 is out of range 1-12");
        assert_eq!(error("0 0 * * 8"), "day-of-week field: 8 is out of range 0-7");
        assert_eq!(error("99999999999 * * * *"), "minute field: 99999999999 is out of range 0-59");
        assert_eq!(error("*/0 * * * *"), "minute field: step \"0\" must be a whole number of at least 1");
        assert_eq!(error("* * * * 1/x"), "day-of-week field: step \"x\" must be a whole number of at least 1");
        assert_eq!(error("0 22-2 * * *"), "hour field: range 22-2 runs backwards; write it as 22-23,0-2");
        assert_eq!(error("0 0 * * FRI-MON"), "day-of-week field: range 5-1 runs backwards; write it as 5-7,0-1");
        assert_eq!(error("x * * * *"), "minute field: \"x\" is not a number");
        assert_eq!(error("0 0 * JANUARY *"), "month field: \"JANUARY\" is not a number or month name (JAN-DEC)");
        assert_eq!(error("0 0 * * MON-"), "day-of-week field: \"\" is not a number or day name (SUN-SAT)");
        assert_eq!(error("1,,2 * * * *"), "minute field: empty list item; remove the stray comma");
        assert_eq!(error("? * * * *"), "minute field: ? is only allowed in day-of-month and day-of-week; write *");
        let fields = "(minute hour day-of-month month day-of-week)";
        assert_eq!(error("0 0 * *"), format!("expected 5 fields {fields}, found 4"));
        assert_eq!(error("0 0 0 * * *"), format!("expected 5 fields {fields}, found 6"));
        assert_eq!(error(" \t "), format!("the schedule is empty; write 5 fields {fields} or a macro like @daily"));
    }

    #[test]
    fn refuses_time_zone_prefixes_unsupported_macros_and_long_expressions() {
        let tz = "TZ= and CRON_TZ= are not accepted in the schedule; set spec.timeZone";
        assert_eq!(error("TZ=UTC 0 0 * * *"), tz);
        assert_eq!(error("CRON_TZ=Europe/Berlin 0 0 * * *"), tz);
        assert_eq!(error("cron_tz=UTC @daily"), tz);
        let unsupported = "@every and @reboot are not supported; write a 5-field schedule";
        assert_eq!(error("@every 5m"), unsupported);
        assert_eq!(error("@reboot"), unsupported);
        let macros = "@yearly, @annually, @monthly, @weekly, @daily, @midnight or @hourly";
        assert_eq!(error("@fortnightly"), format!("unknown macro \"@fortnightly\"; use {macros}"));
        assert_eq!(error("@daily 0 0 * * *"), "@daily stands alone; remove what follows it");
        let at_limit = format!("0 0 * * {}", "1,".repeat(123) + "1 ");
        assert_eq!(at_limit.len(), MAX_EXPRESSION_BYTES);
        assert!(Cron::parse(&at_limit).is_ok(), "exactly the limit is accepted");
        let long = at_limit + " ";
        assert_eq!(error(&long), "the schedule is 257 bytes long; at most 256 are accepted");
    }

    #[test]
    fn refuses_schedules_that_never_fire() {
        assert_eq!(error("0 0 30 2 *"), "the schedule never fires (day 30 of February)");
        assert_eq!(error("0 0 30,31 2 ?"), "the schedule never fires (days 30 or 31 of February)");
        assert_eq!(
            error("0 0 31 4,6,9,11 *"),
            "the schedule never fires (day 31 of April, June, September or November)"
        );
        assert_eq!(error("0 0 31 2 */2"), "the schedule never fires (day 31 of February)");
        assert!(Cron::parse("0 0 29 2 *").is_ok(), "leap years hold February 29");
        assert!(Cron::parse("0 0 30 2 1").is_ok(), "a restricted day of the week fires on its own");
        assert!(Cron::parse("0 0 31 4,5 *").is_ok());
    }

    #[test]
    fn resolves_time_zones() {
        assert_eq!(time_zone(None).unwrap(), TimeZone::UTC);
        assert_eq!(zone("UTC").iana_name(), Some("UTC"));
        assert_eq!(zone("Etc/UTC").iana_name(), Some("Etc/UTC"));
        assert_eq!(zone("Europe/Berlin").iana_name(), Some("Europe/Berlin"));
        let error = |name| time_zone(Some(name)).unwrap_err().to_string();
        assert_eq!(error("Mars/Base"), "unknown time zone \"Mars/Base\"");
        assert_eq!(error("Local"), "unknown time zone \"Local\"");
        let posix = "is not an IANA name (POSIX TZ strings are not accepted); write one like \"Europe/Berlin\"";
        for name in ["EST5EDT,M3.2.0,M11.1.0", ":America/New_York", "<+03>-3", "../../etc/passwd", "/etc/localtime"] {
            assert_eq!(error(name), format!("time zone {name:?} {posix}"));
        }
        assert_eq!(
            error(""),
            "the time zone must be an IANA name like \"Europe/Berlin\", or absent for UTC; it is empty"
        );
    }

    #[test]
    fn fires_every_minute_and_every_quarter_hour() {
        let every = firings("* * * * *", "UTC", utc("2026-01-01T00:00:30Z"), 2);
        assert_eq!(every, [utc("2026-01-01T00:01Z"), utc("2026-01-01T00:02Z")]);
        let quarter = firings("*/15 * * * *", "UTC", utc("2026-01-01T23:07Z"), 4);
        let expected = ["2026-01-01T23:15Z", "2026-01-01T23:30Z", "2026-01-01T23:45Z", "2026-01-02T00:00Z"];
        assert_eq!(quarter, expected.map(utc));
    }

    #[test]
    fn skips_the_weekend_for_weekdays() {
        let friday = utc("2026-01-09T09:00Z");
        assert_eq!(friday.to_zoned(TimeZone::UTC).weekday(), jiff::civil::Weekday::Friday);
        let next = firings("0 9 * * 1-5", "UTC", friday, 2);
        assert_eq!(next, [utc("2026-01-12T09:00Z"), utc("2026-01-13T09:00Z")]);
        assert_eq!(firings("0 9 * * MON-FRI", "UTC", utc("2026-01-09T08:59Z"), 1), [friday]);
    }

    #[test]
    fn finds_the_next_leap_day() {
        assert_eq!(
            firings("0 0 29 2 *", "UTC", utc("2026-03-01T00:00Z"), 2),
            [utc("2028-02-29T00:00Z"), utc("2032-02-29T00:00Z")]
        );
        assert_eq!(firings("0 0 29 2 *", "UTC", utc("2096-03-01T00:00Z"), 1), [utc("2104-02-29T00:00Z")]);
    }

    #[test]
    fn gives_up_after_eight_years() {
        // February 29 on a Sunday: 2032, then 2060.
        let cron = cron("0 0 29 2 */7");
        assert_eq!(cron.next_after(utc("2026-01-01T00:00Z"), &TimeZone::UTC), Some(utc("2032-02-29T00:00Z")));
        assert_eq!(cron.next_after(utc("2033-01-01T00:00Z"), &TimeZone::UTC), None);
    }

    #[test]
    fn either_day_field_matches_when_both_are_restricted() {
        // 2026-01-02, 09, 16 and 23 are Fridays; 2026-01-13 is a Tuesday.
        let either = firings("0 0 13 * 5", "UTC", utc("2026-01-01T00:00Z"), 5);
        let expected = ["2026-01-02T00:00Z", "2026-01-09T00:00Z", "2026-01-13T00:00Z", "2026-01-16T00:00Z"];
        assert_eq!(either[..4], expected.map(utc));
        assert_eq!(either[4], utc("2026-01-23T00:00Z"));
        let dom_only = firings("0 0 13 * *", "UTC", utc("2026-01-01T00:00Z"), 2);
        assert_eq!(dom_only, [utc("2026-01-13T00:00Z"), utc("2026-02-13T00:00Z")]);
        let dow_only = firings("0 0 * * 5", "UTC", utc("2026-01-10T00:00Z"), 1);
        assert_eq!(dow_only, [utc("2026-01-16T00:00Z")]);
        // `*/10` starts with `*`, so both must match: days 1, 11, 21 or 31 that are Fridays.
        let both = firings("0 0 */10 * 5", "UTC", utc("2026-01-01T00:00Z"), 1);
        assert_eq!(both, [utc("2026-05-01T00:00Z")]);
        assert_eq!(both[0].to_zoned(TimeZone::UTC).weekday(), jiff::civil::Weekday::Friday);
    }

    #[test]
    fn new_york_spring_forward_fires_gap_times_once_at_the_gap_end() {
        let midnight = at("2026-03-08T00:00-05:00[America/New_York]");
        let gap_end = at("2026-03-08T03:00-04:00[America/New_York]");
        assert_eq!(gap_end, utc("2026-03-08T07:00Z"));
        assert!("2026-03-08T02:30-05:00[America/New_York]".parse::<Zoned>().is_err(), "02:30 does not exist");
        assert_eq!(
            firings("30 2 * * *", "America/New_York", midnight, 2),
            [gap_end, at("2026-03-09T02:30-04:00[America/New_York]")]
        );
        assert_eq!(
            firings("*/15 2 * * *", "America/New_York", midnight, 2),
            [gap_end, at("2026-03-09T02:00-04:00[America/New_York]")]
        );
        assert_eq!(firings("0 3 * * *", "America/New_York", midnight, 1), [gap_end]);
        assert_eq!(
            firings("0 2,3 * * *", "America/New_York", midnight, 2),
            [gap_end, at("2026-03-09T02:00-04:00[America/New_York]")]
        );
        assert_eq!(
            firings("30 2,3 * * *", "America/New_York", midnight, 3),
            [gap_end, at("2026-03-08T03:30-04:00[America/New_York]"), at("2026-03-09T02:30-04:00[America/New_York]")]
        );
        assert_eq!(firings("59 1 * * *", "America/New_York", midnight, 1), [utc("2026-03-08T06:59Z")]);
    }

    #[test]
    fn new_york_fall_back_fires_repeated_times_at_their_first_occurrence() {
        let midnight = at("2026-11-01T00:00-04:00[America/New_York]");
        let first = at("2026-11-01T01:30-04:00[America/New_York]");
        assert_eq!(first, utc("2026-11-01T05:30Z"));
        assert_eq!(at("2026-11-01T01:30-05:00[America/New_York]"), utc("2026-11-01T06:30Z"));
        assert_eq!(
            firings("30 1 * * *", "America/New_York", midnight, 2),
            [first, at("2026-11-02T01:30-05:00[America/New_York]")]
        );
        for after in ["2026-11-01T05:30Z", "2026-11-01T06:00Z", "2026-11-01T06:29Z", "2026-11-01T06:30Z"] {
            let next = firings("30 1 * * *", "America/New_York", utc(after), 1);
            assert_eq!(next, [at("2026-11-02T01:30-05:00[America/New_York]")], "after {after}");
        }
    }

    #[test]
    fn new_york_fall_back_hourly_skips_the_second_one_o_clock() {
        let zone = zone("America/New_York");
        let day = jiff::civil::date(2026, 11, 1);
        let hourly = firings("0 * * * *", "America/New_York", at("2026-11-01T00:00-04:00[America/New_York]"), 23);
        // jiff's default (compatible) disambiguation takes the earlier time in a fold.
        let expected: Vec<Timestamp> =
            (1..24).map(|hour| day.at(hour, 0, 0, 0).to_zoned(zone.clone()).unwrap().timestamp()).collect();
        assert_eq!(hourly, expected);
        assert_eq!(hourly[..2], [utc("2026-11-01T05:00Z"), utc("2026-11-01T07:00Z")]);
        assert!(!hourly.contains(&utc("2026-11-01T06:00Z")));
        assert_eq!(cron("0 * * * *").next_after(utc("2026-11-01T05:00Z"), &zone), Some(utc("2026-11-01T07:00Z")));
    }

    #[test]
    fn lord_howe_half_hour_fold_and_gap() {
        let lord_howe = "Australia/Lord_Howe";
        let first = at("2026-04-05T01:45+11:00[Australia/Lord_Howe]");
        assert_eq!(at("2026-04-05T01:45+10:30[Australia/Lord_Howe]"), first + SignedDuration::from_mins(30));
        let fold = firings("45 1 * * *", lord_howe, utc("2026-04-04T00:00Z"), 2);
        assert_eq!(fold, [first, at("2026-04-06T01:45+10:30[Australia/Lord_Howe]")]);
        let gap_end = at("2026-10-04T02:30+11:00[Australia/Lord_Howe]");
        assert_eq!(gap_end, utc("2026-10-03T15:30Z"));
        let gap = firings("15 2 * * *", lord_howe, utc("2026-10-03T00:00Z"), 2);
        assert_eq!(gap, [gap_end, at("2026-10-05T02:15+11:00[Australia/Lord_Howe]")]);
        let tens = firings("*/10 2 * * *", lord_howe, utc("2026-10-03T00:00Z"), 3);
        let after_gap = ["2026-10-04T02:40+11:00[Australia/Lord_Howe]", "2026-10-04T02:50+11:00[Australia/Lord_Howe]"];
        assert_eq!(tens, [gap_end, at(after_gap[0]), at(after_gap[1])]);
    }

    #[test]
    fn berlin_every_seven_minutes_increases_strictly_for_ten_thousand_firings() {
        let fires = firings("*/7 * * * *", "Europe/Berlin", utc("2026-03-20T00:00Z"), 10_000);
        assert_eq!(fires.len(), 10_000);
        assert!(fires.last().unwrap() > &utc("2026-03-29T02:00Z"), "spans the spring-forward gap");
        for pair in fires.windows(2) {
            let step = pair[1].duration_since(pair[0]);
            assert!(step > SignedDuration::ZERO && step <= SignedDuration::from_mins(7), "{pair:?}");
        }
    }

    /// Whether `cron` schedules the wall-clock minute `civil`.
    fn scheduled(cron: &Cron, civil: DateTime) -> bool {
        cron.day_matches(civil.date()) && cron.hours & 1 << civil.hour() != 0 && cron.minutes & 1 << civil.minute() != 0
    }

    /// The firings in (`from`, `to`] found by watching the wall clock minute by minute: a scheduled
    /// wall-clock minute fires the first time the clock reaches or passes it.
    fn watched_firings(cron: &Cron, walls: &[(Timestamp, DateTime)]) -> Vec<Timestamp> {
        let mut high = walls[0].1;
        let mut fired = Vec::new();
        for &(instant, wall) in &walls[1..] {
            let mut civil = high;
            while civil < wall {
                civil = civil.checked_add(SignedDuration::from_mins(1)).unwrap();
                if scheduled(cron, civil) {
                    fired.push(instant);
                    break;
                }
            }
            high = high.max(wall);
        }
        fired
    }

    #[test]
    fn matches_a_minute_by_minute_wall_clock_around_transitions() {
        let schedules = [
            "* * * * *",
            "*/15 * * * *",
            "30 1,2 * * *",
            "0 * * * *",
            "45 2 * * *",
            "*/7 1-3 * * *",
            "0,30 0-3 * * *",
            "0 0 * * *",
            "59 23 * * *",
            "0 3 * * *",
            "0 2 * * *",
            "20 0-4 * * 0,6",
        ];
        let zones = [
            ("America/New_York", "2026-01-01T00:00Z", 2),
            ("Australia/Lord_Howe", "2026-01-01T00:00Z", 2),
            ("Europe/Berlin", "2026-01-01T00:00Z", 2),
            ("America/St_Johns", "2026-01-01T00:00Z", 2),
            ("Antarctica/Troll", "2026-01-01T00:00Z", 2),
            ("Africa/Casablanca", "2026-01-01T00:00Z", 2),
            ("America/Santiago", "2026-01-01T00:00Z", 2),
            ("America/Havana", "2026-01-01T00:00Z", 2),
            ("Pacific/Apia", "2011-01-01T00:00Z", 3),
        ];
        for (name, start, count) in zones {
            let zone = zone(name);
            for transition in zone.following(utc(start)).take(count) {
                let from = transition.timestamp() - SignedDuration::from_hours(30);
                let walls: Vec<(Timestamp, DateTime)> = (0..=60 * 60)
                    .map(|minute| from + SignedDuration::from_mins(minute))
                    .map(|instant| (instant, zone.to_datetime(instant)))
                    .collect();
                let to = walls[walls.len() - 1].0;
                for expression in schedules {
                    let cron = cron(expression);
                    let computed: Vec<Timestamp> =
                        std::iter::successors(cron.next_after(from, &zone), |&t| cron.next_after(t, &zone))
                            .take_while(|&t| t <= to)
                            .collect();
                    let watched = watched_firings(&cron, &walls);
                    let same = computed.iter().zip(&watched).take_while(|(c, w)| c == w).count();
                    let near = |fires: &[Timestamp]| fires[same..fires.len().min(same + 3)].to_vec();
                    assert!(
                        computed == watched,
                        "{expression} in {name} around {}: computed {:?}…, watched {:?}…",
                        transition.timestamp(),
                        near(&computed),
                        near(&watched)
                    );
                }
            }
        }
    }
}
