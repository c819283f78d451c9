//! The one-line form of a Run's progress in a streamed answer (`> plan: …`,
//! `> ✓ tool · ok · 12 ms`), and its removal when a client sends the answer back
//! as history, so it never feeds the model.

use crate::engine::progress::RunProgress;

/// Prefixes of every progress line.
const PREFIXES: [&str; 4] = ["> plan: ", "> ✓ ", "> ✗ ", "> skills: "];

/// The line of an event (with its newline); `None` for events that are not lines.
pub fn line(event: &RunProgress) -> Option<String> {
    match event {
        RunProgress::Plan { checks } if checks.is_empty() => Some("> plan: no checks\n".to_string()),
        RunProgress::Plan { checks } => {
            let noun = if checks.len() == 1 { "check" } else { "checks" };
            Some(format!("> plan: {} {noun} ({})\n", checks.len(), checks.join(", ")))
        }
        RunProgress::Tool { name, status, duration_ms, .. } => {
            let mark = if status == "ok" { "✓" } else { "✗" };
            Some(format!("> {mark} {name} · {status} · {duration_ms} ms\n"))
        }
        RunProgress::Skills { names } => Some(format!("> skills: {}\n", names.join(", "))),
        RunProgress::Started { .. } | RunProgress::AnswerDelta(_) => None,
    }
}

fn is_progress(line: &str) -> bool {
    PREFIXES.iter().any(|prefix| line.starts_with(prefix))
}

/// The text without progress lines (wherever they are), trimmed.
pub fn strip_progress(text: &str) -> String {
    if !text.lines().any(is_progress) {
        return text.to_string();
    }
    let kept: Vec<&str> = text.lines().filter(|line| !is_progress(line)).collect();
    kept.join("\n").trim().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_become_one_line_each() {
        let plan = RunProgress::Plan { checks: vec!["postgres.activity".into(), "inventory.host".into()] };
        assert_eq!(line(&plan).unwrap(), "> plan: 2 checks (postgres.activity, inventory.host)\n");
        assert_eq!(line(&RunProgress::Plan { checks: vec![] }).unwrap(), "> plan: no checks\n");
        let ok = RunProgress::Tool { name: "a.b".into(), id: "call-1".into(), status: "ok".into(), duration_ms: 12 };
        assert_eq!(line(&ok).unwrap(), "> ✓ a.b · ok · 12 ms\n");
        let failed = RunProgress::Tool { name: "a.b".into(), id: "c".into(), status: "timeout".into(), duration_ms: 3 };
        assert_eq!(line(&failed).unwrap(), "> ✗ a.b · timeout · 3 ms\n");
        assert_eq!(line(&RunProgress::Skills { names: vec!["pg".into()] }).unwrap(), "> skills: pg\n");
        assert_eq!(line(&RunProgress::AnswerDelta("x".into())), None);
    }

    #[test]
    fn stripping_removes_only_progress_lines() {
        let events = [
            RunProgress::Plan { checks: vec!["a.b".into()] },
            RunProgress::Tool { name: "a.b".into(), id: "c".into(), status: "ok".into(), duration_ms: 1 },
        ];
        let block: String = events.iter().filter_map(line).collect();
        assert_eq!(strip_progress(&format!("{block}\nThe answer\n> a quote stays")), "The answer\n> a quote stays");
        assert_eq!(strip_progress("  untouched  "), "  untouched  ");
    }
}
