//! The macro that turns the settings table of `mod.rs` into [`super::Settings`], its
//! defaults, its origins and its `serve` flags.
//!
//! A setting states its bound once, in a `range` line, and the table makes from it the check,
//! the message a bad value gets and the flag help:
//! - `range u32 1 ..= 50;` (or `u64`): an integer from 1 to 50; `1 ..= MAX` is a positive integer;
//! - `range bytes 1024 ..= 67108864;`: the same, in bytes; `range optional 512 ..= 10000000;`: or empty;
//! - `range duration "0s" ..= "10m", such as "30s";`: a duration from zero to 10 minutes;
//! - `range duration ">0" ..= "24h", such as "10m";`: a duration above zero, at most 24 hours.
//!
//! A setting without a `range` states its own `expect` text and `check`.

/// What a bad value of a setting is told it should be: its `expect` text, or the range it declares.
macro_rules! setting_expect {
    ($expect:literal ;) => {
        $expect
    };
    (; bytes 1 MAX) => {
        "a positive integer (bytes)"
    };
    (; bytes $lo:literal $hi:literal) => {
        concat!("an integer from ", stringify!($lo), " to ", stringify!($hi), " (bytes)")
    };
    (; duration "0s" $hi:literal $eg:literal) => {
        concat!("a duration from 0s to ", $hi, ", such as ", $eg)
    };
    (; duration ">0" $hi:literal $eg:literal) => {
        concat!("a duration above 0 and at most ", $hi, ", such as ", $eg)
    };
    (; optional $lo:literal $hi:literal) => {
        concat!("an integer from ", stringify!($lo), " to ", stringify!($hi), ", or empty")
    };
    (; $rt:ident 1 MAX) => {
        "a positive integer"
    };
    (; $rt:ident $lo:literal $hi:literal) => {
        concat!("an integer from ", stringify!($lo), " to ", stringify!($hi))
    };
}

/// The check of a setting: its `check`, or the range it declares.
macro_rules! setting_check {
    ($check:expr ;) => {
        $check
    };
    (; u32 1 MAX) => {
        value::u32_in::<1, { u32::MAX }>
    };
    (; u32 $lo:literal $hi:literal) => {
        value::u32_in::<$lo, $hi>
    };
    (; optional $lo:literal $hi:literal) => {
        optional::u32_in::<$lo, $hi>
    };
    (; $rt:ident 1 MAX) => {
        value::u64_in::<1, { u64::MAX }>
    };
    (; $rt:ident $lo:literal $hi:literal) => {
        value::u64_in::<$lo, $hi>
    };
    (; duration "0s" $hi:literal $eg:literal) => {
        duration::upto::<{ duration::seconds($hi) }, true>
    };
    (; duration ">0" $hi:literal $eg:literal) => {
        duration::upto::<{ duration::seconds($hi) }, false>
    };
}

/// The description of a setting in its flag's help: its doc line, and the range it declares.
macro_rules! setting_about {
    ($doc:expr ;) => {
        $doc
    };
    ($doc:expr ; $rt:ident 1 MAX) => {
        $doc
    };
    ($doc:expr ; duration "0s" $hi:literal $eg:literal) => {
        concat!($doc, ", <= ", $hi)
    };
    ($doc:expr ; duration ">0" $hi:literal $eg:literal) => {
        concat!($doc, ", > 0 and <= ", $hi)
    };
    ($doc:expr ; $rt:ident $lo:literal $hi:literal) => {
        concat!($doc, ", ", stringify!($lo), "-", stringify!($hi))
    };
}

macro_rules! settings_table {
    ($(
        $(#[doc = $doc:literal])*
        $key:ident : $ty:ty = $default:expr ;
            flag $flag:literal [$($fty:tt)*] $(value_name $vn:literal)? $(delimiter $delim:literal)? ;
            $(expect $expect:literal ;)?
            $(range $rt:ident $lo:tt ..= $hi:tt $(, such as $eg:literal)? ;)?
            $(check $check:expr ;)?
            section $section:literal ;
    )*) => {
        /// Resolved service settings. Use [`Settings::origin`] to learn where
        /// each value came from.
        #[derive(Debug, Clone, PartialEq)]
        pub struct Settings {
            $( $(#[doc = $doc])* pub $key: $ty, )*
            /// The config file that was read, if any (as given).
            pub config_file: Option<PathBuf>,
            /// Source of every non-default setting, by key.
            pub origins: BTreeMap<&'static str, Source>,
            /// One warning per setting the config file still gives at its top level, naming
            /// the section it moved to.
            pub deprecated: Vec<String>,
        }

        impl Default for Settings {
            fn default() -> Self {
                Settings {
                    $( $key: $default, )*
                    config_file: None,
                    origins: BTreeMap::new(),
                    deprecated: Vec::new(),
                }
            }
        }

        /// All setting keys (snake case, as in the config file).
        pub const KEYS: &[&str] = &[$(stringify!($key)),*];

        /// The config file section of setting `key` (`max_tokens` is in `budget`).
        pub fn section_of(key: &str) -> Option<&'static str> {
            match key {
                $( stringify!($key) => Some($section), )*
                _ => None,
            }
        }

        /// The command-line flag for setting `key` (e.g. `--max-tokens`).
        pub fn flag_name(key: &str) -> Option<&'static str> {
            match key {
                $( stringify!($key) => Some(concat!("--", $flag)), )*
                _ => None,
            }
        }

        /// The help line of setting `key`'s flag as `akritas serve --help` prints it:
        /// description, environment variable and built-in default (empty for an unknown key).
        pub(crate) fn flag_help_for(key: &str) -> String {
            match key {
                $( stringify!($key) => flag_help(
                    setting_about!(concat!($($doc),*) ; $($rt $lo $hi $($eg)?)?),
                    &env_var_name(stringify!($key)),
                    &SettingValue::to_text(&Settings::default().$key),
                ), )*
                _ => String::new(),
            }
        }

        /// `akritas serve` flags. Each flag overrides its `AKRITAS_*`
        /// environment variable, the config file and the default; an absent
        /// flag leaves the lower layers in effect. The help of each names its
        /// variable and shows the built-in default (clap's own `env` and
        /// `default_value` would hide which layer a value came from).
        #[derive(clap::Args, Debug, Default, Clone)]
        pub struct ServeFlags {
            /// Strict JSON config file
            #[arg(long, value_name = "PATH", help = config_flag_help())]
            pub config: Option<PathBuf>,
            $(
                $(#[doc = $doc])*
                #[arg(
                    long = $flag
                    $(, value_name = $vn)?
                    $(, value_delimiter = $delim)?,
                    help = flag_help_for(stringify!($key))
                )]
                pub $key: $($fty)*,
            )*
        }

        fn apply_file(
            s: &mut Settings,
            path: &Path,
            entries: &[file::Entry],
        ) -> Result<(), ConfigError> {
            for file::Entry { key, value: raw, pointer: ptr } in entries {
                match key.as_str() {
                    $( stringify!($key) => {
                        let v = <$ty as SettingValue>::from_json(raw, setting_expect!($($expect)? ; $($rt $lo $hi $($eg)?)?))
                            .and_then(|v| (setting_check!($($check)? ; $($rt $lo $hi $($eg)?)?))(v, setting_expect!($($expect)? ; $($rt $lo $hi $($eg)?)?)).map_err(|p| {
                                value::JsonErr::new(format!("{p}, got {}", value::show(raw)))
                            }))
                            .map_err(|e| ConfigError::InvalidFile {
                                path: path.to_path_buf(),
                                pointer: format!("{ptr}{}", e.suffix),
                                problem: e.problem,
                            })?;
                        s.$key = v;
                        s.origins.insert(
                            stringify!($key),
                            Source::File(path.to_path_buf(), ptr.clone()),
                        );
                    } )*
                    _ => {}
                }
            }
            Ok(())
        }

        fn apply_env(
            s: &mut Settings,
            env: &dyn Fn(&str) -> Option<String>,
        ) -> Result<(), ConfigError> {
            $(
                let var = env_var_name(stringify!($key));
                if let Some(text) = env(&var) {
                    let v = <$ty as SettingValue>::from_text(&text, setting_expect!($($expect)? ; $($rt $lo $hi $($eg)?)?))
                        .and_then(|v| (setting_check!($($check)? ; $($rt $lo $hi $($eg)?)?))(v, setting_expect!($($expect)? ; $($rt $lo $hi $($eg)?)?)))
                        .map_err(|problem| ConfigError::InvalidEnv {
                            var: var.clone(),
                            value: text.clone(),
                            problem,
                        })?;
                    s.$key = v;
                    s.origins.insert(stringify!($key), Source::Env(var));
                }
            )*
            Ok(())
        }

        fn apply_flags(s: &mut Settings, flags: &ServeFlags) -> Result<(), ConfigError> {
            $(
                let flag = concat!("--", $flag);
                if let Some(parsed) = flags.$key.parse::<$ty>(setting_expect!($($expect)? ; $($rt $lo $hi $($eg)?)?)) {
                    let v = parsed
                        .and_then(|v| (setting_check!($($check)? ; $($rt $lo $hi $($eg)?)?))(v, setting_expect!($($expect)? ; $($rt $lo $hi $($eg)?)?)).map_err(|p| (flags.$key.shown(), p)))
                        .map_err(|(value, problem)| ConfigError::InvalidFlag {
                            flag: flag.to_string(),
                            value,
                            problem,
                        })?;
                    s.$key = v;
                    s.origins.insert(stringify!($key), Source::Flag(flag.to_string()));
                }
            )*
            Ok(())
        }
    };
}
