//! The host-built unified diff: one hunk per changed file, from the first to
//! the last differing line with three lines of context, in the form `git apply`
//! accepts. The diff is what an approval is bound to (its [`sha256`]). Pure.

use std::fmt::Write;

use sha2::{Digest, Sha256};

use super::{FileChange, Operation};

/// Lines of context around the changed lines.
pub const CONTEXT: usize = 3;

const NO_NEWLINE: &str = "\\ No newline at end of file\n";

/// The unified diff of `changes`, files sorted by path; a file whose content did
/// not change contributes nothing.
pub fn unified(changes: &[FileChange]) -> String {
    let mut sorted: Vec<&FileChange> = changes.iter().collect();
    sorted.sort_by(|a, b| a.path.cmp(&b.path));
    let mut out = String::new();
    for change in sorted {
        file_diff(&mut out, change);
    }
    out
}

/// Lowercase hex SHA-256 of a diff.
pub fn sha256(diff: &str) -> String {
    hex::encode(Sha256::digest(diff.as_bytes()))
}

fn file_diff(out: &mut String, change: &FileChange) {
    let before = change.before.as_deref().unwrap_or("");
    if change.before.is_some() && before == change.after {
        return;
    }
    let old: Vec<&str> = before.split_inclusive('\n').collect();
    let new: Vec<&str> = change.after.split_inclusive('\n').collect();
    let prefix = old.iter().zip(&new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..].iter().rev().zip(new[prefix..].iter().rev()).take_while(|(a, b)| a == b).count();
    let start = prefix.saturating_sub(CONTEXT);
    let after_context = suffix.min(CONTEXT);
    let old_end = old.len() - suffix + after_context;
    let new_end = new.len() - suffix + after_context;

    let (a, b) = (name("a/", &change.path), name("b/", &change.path));
    // Writing to a String cannot fail.
    let _ = writeln!(out, "diff --git {a} {b}");
    if change.operation == Operation::Create || change.before.is_none() {
        out.push_str("new file mode 100644\n--- /dev/null\n");
    } else {
        let _ = writeln!(out, "--- {a}");
    }
    let _ = writeln!(out, "+++ {b}");
    let _ = writeln!(out, "@@ -{} +{} @@", range(start, old_end - start), range(start, new_end - start));
    for line in &old[start..prefix] {
        push_line(out, ' ', line);
    }
    for line in &old[prefix..old.len() - suffix] {
        push_line(out, '-', line);
    }
    for line in &new[prefix..new.len() - suffix] {
        push_line(out, '+', line);
    }
    for line in &old[old.len() - suffix..old_end] {
        push_line(out, ' ', line);
    }
}

/// `prefix` + `path`, C-quoted as git does when the path holds a double quote
/// (paths never hold backslashes or control characters: [`super::paths::check`]).
fn name(prefix: &str, path: &str) -> String {
    if path.contains('"') { format!("\"{prefix}{}\"", path.replace('"', "\\\"")) } else { format!("{prefix}{path}") }
}

/// `start,count` with a 1-based start, or `0,0` for an empty side.
fn range(start: usize, count: usize) -> String {
    if count == 0 { format!("{start},0") } else { format!("{},{count}", start + 1) }
}

fn push_line(out: &mut String, marker: char, line: &str) {
    out.push(marker);
    out.push_str(line);
    if !line.ends_with('\n') {
        out.push('\n');
        out.push_str(NO_NEWLINE);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::testing::{create, replace};
    use std::path::Path;
    use std::process::Command;

    fn git(dir: &Path, args: &[&str]) -> std::process::Output {
        Command::new("git").args(args).current_dir(dir).output().expect("git is installed")
    }

    /// Writes every original into a fresh git tree, checks and applies the diff with
    /// `git apply`, and compares every file with its `after`.
    fn assert_git_applies(changes: &[FileChange]) -> String {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        assert!(git(root, &["init", "-q"]).status.success());
        for change in changes {
            if let Some(before) = &change.before {
                let path = root.join(&change.path);
                std::fs::create_dir_all(path.parent().unwrap()).unwrap();
                std::fs::write(path, before).unwrap();
            }
        }
        let diff = unified(changes);
        let patches = tempfile::tempdir().unwrap();
        let patch = patches.path().join("change.diff");
        std::fs::write(&patch, &diff).unwrap();
        let check = git(root, &["apply", "--check", "-v", patch.to_str().unwrap()]);
        assert!(
            check.status.success(),
            "git apply --check refused:\n{diff}\n{}",
            String::from_utf8_lossy(&check.stderr)
        );
        let apply = git(root, &["apply", patch.to_str().unwrap()]);
        assert!(apply.status.success(), "git apply failed: {}", String::from_utf8_lossy(&apply.stderr));
        for change in changes {
            let now = std::fs::read_to_string(root.join(&change.path)).unwrap();
            assert_eq!(now, change.after, "{} after git apply\n{diff}", change.path);
        }
        diff
    }

    fn numbered(range: std::ops::RangeInclusive<u32>) -> String {
        range.map(|i| format!("line {i}\n")).collect()
    }

    #[test]
    fn a_change_in_the_middle_has_three_lines_of_context() {
        let before = numbered(1..=10);
        let after = before.replace("line 5\n", "line five\n");
        let diff = assert_git_applies(&[replace("conf/app.txt", &before, &after)]);
        assert_eq!(
            diff,
            "diff --git a/conf/app.txt b/conf/app.txt\n--- a/conf/app.txt\n+++ b/conf/app.txt\n\
             @@ -2,7 +2,7 @@\n line 2\n line 3\n line 4\n-line 5\n+line five\n line 6\n line 7\n line 8\n"
        );
    }

    #[test]
    fn one_hunk_spans_the_first_to_the_last_difference() {
        let before = numbered(1..=20);
        let after = before.replace("line 3\n", "line III\n").replace("line 17\n", "line XVII\n");
        let diff = assert_git_applies(&[replace("a.txt", &before, &after)]);
        assert_eq!(diff.matches("@@ -").count(), 1);
        assert!(diff.contains("@@ -1,20 +1,20 @@\n"), "{diff}");
    }

    #[test]
    fn changes_at_the_start_and_the_end() {
        let before = numbered(1..=8);
        let start = before.replace("line 1\n", "first\n");
        let diff = assert_git_applies(&[replace("a.txt", &before, &start)]);
        assert!(diff.contains("@@ -1,4 +1,4 @@\n-line 1\n+first\n line 2\n"), "{diff}");
        let end = before.replace("line 8\n", "last\n");
        let diff = assert_git_applies(&[replace("a.txt", &before, &end)]);
        assert!(diff.contains("@@ -5,4 +5,4 @@\n line 5\n line 6\n line 7\n-line 8\n+last\n"), "{diff}");
        let appended = format!("{before}line 9\n");
        let diff = assert_git_applies(&[replace("a.txt", &before, &appended)]);
        assert!(diff.ends_with("@@ -6,3 +6,4 @@\n line 6\n line 7\n line 8\n+line 9\n"), "{diff}");
    }

    #[test]
    fn deleted_lines() {
        let before = numbered(1..=10);
        let after = before.replace("line 4\nline 5\nline 6\n", "");
        let diff = assert_git_applies(&[replace("a.txt", &before, &after)]);
        assert!(
            diff.contains("@@ -1,9 +1,6 @@\n line 1\n line 2\n line 3\n-line 4\n-line 5\n-line 6\n line 7\n"),
            "{diff}"
        );
        let diff = assert_git_applies(&[replace("a.txt", "only\n", "")]);
        assert!(diff.ends_with("@@ -1,1 +0,0 @@\n-only\n"), "{diff}");
    }

    #[test]
    fn created_files() {
        let diff = assert_git_applies(&[create("deploy/new.yaml", "a: 1\nb: 2\n")]);
        assert_eq!(
            diff,
            "diff --git a/deploy/new.yaml b/deploy/new.yaml\nnew file mode 100644\n--- /dev/null\n+++ b/deploy/new.yaml\n\
             @@ -0,0 +1,2 @@\n+a: 1\n+b: 2\n"
        );
        let diff = assert_git_applies(&[create("n.txt", "no newline")]);
        assert!(diff.ends_with("@@ -0,0 +1,1 @@\n+no newline\n\\ No newline at end of file\n"), "{diff}");
    }

    #[test]
    fn missing_trailing_newlines_before_and_after() {
        // Added at the end.
        let diff = assert_git_applies(&[replace("a.txt", "a\nb", "a\nb\n")]);
        assert!(diff.ends_with("@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+b\n"), "{diff}");
        // Removed at the end.
        let diff = assert_git_applies(&[replace("a.txt", "a\nb\n", "a\nc")]);
        assert!(diff.ends_with("-b\n+c\n\\ No newline at end of file\n"), "{diff}");
        // Missing on both sides, change earlier: the last line is context.
        let diff = assert_git_applies(&[replace("a.txt", "a\nb\nc", "x\nb\nc")]);
        assert!(diff.ends_with("@@ -1,3 +1,3 @@\n-a\n+x\n b\n c\n\\ No newline at end of file\n"), "{diff}");
        // Missing on both sides, the last line changes.
        assert_git_applies(&[replace("a.txt", "a\nb", "a\nc")]);
    }

    #[test]
    fn several_files_are_sorted_and_unchanged_ones_left_out() {
        let changes = [
            replace("z.txt", "1\n", "2\n"),
            create("m/new.txt", "new\n"),
            replace("a.txt", "x\n", "y\n"),
            replace("same.txt", "s\n", "s\n"),
        ];
        let diff = assert_git_applies(&changes);
        let headers: Vec<&str> = diff.lines().filter(|l| l.starts_with("diff --git")).collect();
        assert_eq!(
            headers,
            vec!["diff --git a/a.txt b/a.txt", "diff --git a/m/new.txt b/m/new.txt", "diff --git a/z.txt b/z.txt"]
        );
    }

    #[test]
    fn nftables_insertion_after_line_seven_of_eight() {
        let before = "nftables:\n  tables:\n    inet_filter:\n      backends:\n        orders-v1:\n          address: 10.20.4.10\n          port: 8443\n  policy: drop\n";
        let after = before.replace(
            "          port: 8443\n",
            "          port: 8443\n        orders-v2:\n          address: 10.20.4.15\n          port: 8443\n          comment: orders v2\n          enabled: true\n",
        );
        let diff = assert_git_applies(&[replace("pillar/prod/nftables.sls", before, &after)]);
        // Five lines inserted after line 7: context lines 5-7 before, line 8 after.
        assert!(diff.contains("\n@@ -5,4 +5,9 @@\n         orders-v1:\n"), "{diff}");
        // Without a following line (inserted at the end of a 7-line file) the hunk is `-5,3 +5,8`.
        let seven: String = before.lines().take(7).map(|l| format!("{l}\n")).collect();
        let seven_after = after.lines().take(12).map(|l| format!("{l}\n")).collect::<String>();
        let diff = assert_git_applies(&[replace("pillar/prod/nftables.sls", &seven, &seven_after)]);
        assert!(diff.contains("\n@@ -5,3 +5,8 @@\n"), "{diff}");
    }

    #[test]
    fn paths_with_spaces_and_non_ascii_names_apply() {
        assert_git_applies(&[replace("my dir/file name.txt", "a\n", "b\n"), create("docs/café.md", "x\n")]);
        let diff = assert_git_applies(&[replace("say \"hi\".txt", "a\n", "b\n")]);
        assert!(diff.starts_with("diff --git \"a/say \\\"hi\\\".txt\" \"b/say \\\"hi\\\".txt\"\n"), "{diff}");
    }

    #[test]
    fn the_hash_is_hex_sha256() {
        assert_eq!(sha256(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
        assert_eq!(sha256("a").len(), 64);
    }
}
