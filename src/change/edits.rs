//! Exact-replacement materialisation: the proposal's edits applied in
//! memory, in order, each to the *current* content of its file. A replacement's old
//! text must occur exactly once; a create names a new file under an existing
//! directory of the workspace. The result is the final content of every changed file.
//!
//! Pure over the snapshot except for the create checks, which look at the workspace
//! root (blocking: callers run [`materialise`] in `spawn_blocking`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::paths::{self, PathError};
use super::proposal::ProposedEdit;
use super::snapshot::Snapshot;
use super::{FileChange, MAX_FILE_BYTES, MAX_SNAPSHOT_BYTES, Operation};

/// Mode of a created file.
pub const CREATE_MODE: u32 = 0o644;
/// Most start lines an ambiguous match reports.
pub const MAX_MATCH_LINES: usize = 8;

/// The changed files and what the host ignored on the way.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Materialised {
    /// Changed and created files, sorted by path.
    pub changes: Vec<FileChange>,
    /// Host warnings (ignored no-op edits).
    pub warnings: Vec<String>,
}

/// Why the edits cannot be applied. Each message names the edit and its path.
#[derive(Debug, thiserror::Error)]
pub enum EditError {
    /// The proposal has no edits.
    #[error("the proposal has no edits; there is nothing to change")]
    NoEdits,
    /// A path rule.
    #[error("edits[{index}] for {path:?}: {error}")]
    Path {
        /// Edit index.
        index: usize,
        /// The path as proposed.
        path: String,
        /// The rule.
        error: PathError,
    },
    /// Replace of a file that is not in the snapshot.
    #[error(
        "edits[{index}] for {path:?}: replace needs a file of the snapshot, and this one is not in it; edit one of the snapshot's files or create a new file with operation \"create\""
    )]
    NotInSnapshot {
        /// Edit index.
        index: usize,
        /// The path.
        path: String,
    },
    /// Replace without old text.
    #[error("edits[{index}] for {path:?}: replace requires non-empty exact old text copied from the file")]
    EmptyOld {
        /// Edit index.
        index: usize,
        /// The path.
        path: String,
    },
    /// Old text absent.
    #[error(
        "edits[{index}] for {path:?}: old text must match exactly once, but it does not occur in the file's current content (earlier edits included); copy it verbatim from the file"
    )]
    NoMatch {
        /// Edit index.
        index: usize,
        /// The path.
        path: String,
    },
    /// Old text found several times.
    #[error(
        "edits[{index}] for {path:?}: old text must match exactly once, but matches={matches} matching_start_lines={lines:?}; include enough surrounding lines to make it unique"
    )]
    Ambiguous {
        /// Edit index.
        index: usize,
        /// The path.
        path: String,
        /// How many times it occurs (overlapping occurrences included).
        matches: usize,
        /// 1-based start lines of the first [`MAX_MATCH_LINES`] occurrences.
        lines: Vec<usize>,
    },
    /// Create with old text.
    #[error("edits[{index}] for {path:?}: create requires empty old text (put the whole file in new)")]
    CreateWithOld {
        /// Edit index.
        index: usize,
        /// The path.
        path: String,
    },
    /// Create without content.
    #[error("edits[{index}] for {path:?}: create requires the complete, non-empty file content in new")]
    EmptyNew {
        /// Edit index.
        index: usize,
        /// The path.
        path: String,
    },
    /// Create of an existing file.
    #[error(
        "edits[{index}] for {path:?}: cannot create a file that already exists; change it with a replace edit (operation \"replace\") and exact old text"
    )]
    CreateExists {
        /// Edit index.
        index: usize,
        /// The path.
        path: String,
    },
    /// The same file created twice.
    #[error(
        "edits[{index}] for {path:?}: the file is already created by edits[{first}]; create each file once with its full content"
    )]
    CreateTwice {
        /// Edit index.
        index: usize,
        /// The path.
        path: String,
        /// The earlier create.
        first: usize,
    },
    /// NUL in the result.
    #[error(
        "edits[{index}] for {path:?}: the resulting content contains a NUL character; only text files can be changed"
    )]
    Nul {
        /// Edit index.
        index: usize,
        /// The path.
        path: String,
    },
    /// Result over [`MAX_FILE_BYTES`].
    #[error("edits[{index}] for {path:?}: the resulting file has {bytes} bytes; the limit is {MAX_FILE_BYTES}")]
    TooLarge {
        /// Edit index.
        index: usize,
        /// The path.
        path: String,
        /// Its size.
        bytes: usize,
    },
    /// Every edit was a no-op.
    #[error("no effective changes after ignoring no-op edits ({}): old and new are identical; propose edits that change something", ignored.join(", "))]
    NoOpOnly {
        /// `edits[i] for "path"` of each ignored edit.
        ignored: Vec<String>,
    },
    /// The edits of a file cancel out.
    #[error("the edits for {path:?} leave it exactly as it was; remove them or make a real change")]
    Unchanged {
        /// The path.
        path: String,
    },
    /// All final files over [`MAX_SNAPSHOT_BYTES`].
    #[error(
        "the snapshot files and created files add up to {bytes} bytes after the edits; the limit is {MAX_SNAPSHOT_BYTES}"
    )]
    TotalTooLarge {
        /// The total.
        bytes: usize,
    },
}

struct Current {
    original: Option<String>,
    content: String,
    mode: u32,
}

/// Applies `edits` in order to the snapshot's contents in memory. `root` is the
/// canonical workspace root, read only to check creates (parent directory exists
/// inside the root, target absent). Blocking.
pub fn materialise(root: &Path, snapshot: &Snapshot, edits: &[ProposedEdit]) -> Result<Materialised, EditError> {
    if edits.is_empty() {
        return Err(EditError::NoEdits);
    }
    let mut files: BTreeMap<String, Current> = snapshot
        .files
        .iter()
        .map(|f| {
            (f.path.clone(), Current { original: Some(f.content.clone()), content: f.content.clone(), mode: f.mode })
        })
        .collect();
    // Created files by resolved target, to catch one file created under two names.
    let mut created: Vec<(PathBuf, String, usize)> = Vec::new();
    let mut ignored = Vec::new();
    let mut effective = 0usize;
    for (index, edit) in edits.iter().enumerate() {
        let path =
            paths::check(&edit.path).map_err(|error| EditError::Path { index, path: edit.path.clone(), error })?;
        match edit.operation {
            Operation::Create => {
                create(root, &mut files, &mut created, index, path, edit)?;
                effective += 1;
            }
            Operation::Replace => {
                let Some(current) = files.get_mut(&path).filter(|c| c.original.is_some()) else {
                    return Err(EditError::NotInSnapshot { index, path });
                };
                if edit.old.is_empty() {
                    return Err(EditError::EmptyOld { index, path });
                }
                if edit.old == edit.new {
                    ignored.push(format!("edits[{index}] for {path:?}"));
                    continue;
                }
                let starts = occurrences(&current.content, &edit.old);
                match starts.len() {
                    0 => return Err(EditError::NoMatch { index, path }),
                    1 => {}
                    matches => {
                        let lines =
                            starts.iter().take(MAX_MATCH_LINES).map(|&at| line_of(&current.content, at)).collect();
                        return Err(EditError::Ambiguous { index, path, matches, lines });
                    }
                }
                let at = starts[0];
                let mut next = String::with_capacity(current.content.len() - edit.old.len() + edit.new.len());
                next.push_str(&current.content[..at]);
                next.push_str(&edit.new);
                next.push_str(&current.content[at + edit.old.len()..]);
                check_content(index, &path, &next)?;
                current.content = next;
                effective += 1;
            }
        }
    }
    if effective == 0 {
        return Err(EditError::NoOpOnly { ignored });
    }
    let total: usize = files.values().map(|f| f.content.len()).sum();
    if total > MAX_SNAPSHOT_BYTES {
        return Err(EditError::TotalTooLarge { bytes: total });
    }
    let mut changes = Vec::new();
    for (path, file) in files {
        match file.original {
            Some(original) if original == file.content => {
                // Untouched, or edits that cancel out.
                let touched = edits.iter().any(|e| e.path == path && e.old != e.new);
                if touched {
                    return Err(EditError::Unchanged { path });
                }
            }
            original => changes.push(FileChange {
                operation: if original.is_some() { Operation::Replace } else { Operation::Create },
                path,
                before: original,
                after: file.content,
                mode: file.mode,
            }),
        }
    }
    let warnings =
        ignored.iter().map(|edit| format!("ignored no-op {edit} because old and new are identical")).collect();
    Ok(Materialised { changes, warnings })
}

fn create(
    root: &Path,
    files: &mut BTreeMap<String, Current>,
    created: &mut Vec<(PathBuf, String, usize)>,
    index: usize,
    path: String,
    edit: &ProposedEdit,
) -> Result<(), EditError> {
    if !edit.old.is_empty() {
        return Err(EditError::CreateWithOld { index, path });
    }
    if edit.new.is_empty() {
        return Err(EditError::EmptyNew { index, path });
    }
    if let Some((_, _, first)) = created.iter().find(|(_, p, _)| *p == path) {
        return Err(EditError::CreateTwice { index, path, first: *first });
    }
    if files.contains_key(&path) {
        return Err(EditError::CreateExists { index, path });
    }
    let target = match paths::confine_parent(root, &path) {
        Ok(target) => target,
        Err(PathError::Exists(_)) => return Err(EditError::CreateExists { index, path }),
        Err(error) => return Err(EditError::Path { index, path, error }),
    };
    if let Some((_, _, first)) = created.iter().find(|(t, _, _)| *t == target) {
        return Err(EditError::CreateTwice { index, path, first: *first });
    }
    check_content(index, &path, &edit.new)?;
    created.push((target, path.clone(), index));
    files.insert(path, Current { original: None, content: edit.new.clone(), mode: CREATE_MODE });
    Ok(())
}

fn check_content(index: usize, path: &str, content: &str) -> Result<(), EditError> {
    if content.contains('\0') {
        return Err(EditError::Nul { index, path: path.to_owned() });
    }
    if content.len() > MAX_FILE_BYTES {
        return Err(EditError::TooLarge { index, path: path.to_owned(), bytes: content.len() });
    }
    Ok(())
}

/// Byte offsets of every occurrence of `needle`, overlapping ones included (`aa`
/// occurs twice in `aaa`: it is not unique).
fn occurrences(haystack: &str, needle: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut from = 0;
    while let Some(found) = haystack[from..].find(needle) {
        let at = from + found;
        starts.push(at);
        // Step one character: needle is non-empty, so at < haystack.len().
        from = at + haystack[at..].chars().next().map_or(1, char::len_utf8);
    }
    starts
}

/// 1-based line number of byte offset `at`.
fn line_of(text: &str, at: usize) -> usize {
    text.as_bytes()[..at].iter().filter(|&&b| b == b'\n').count() + 1
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::change::SourceFile;
    use crate::change::testing::root;

    fn snapshot(files: &[(&str, &str)]) -> Snapshot {
        Snapshot {
            request: "r".into(),
            files: files
                .iter()
                .map(|(path, content)| SourceFile { path: (*path).into(), content: (*content).into(), mode: 0o640 })
                .collect(),
        }
    }

    fn replace(path: &str, old: &str, new: &str) -> ProposedEdit {
        ProposedEdit { operation: Operation::Replace, path: path.into(), old: old.into(), new: new.into() }
    }

    fn create_edit(path: &str, new: &str) -> ProposedEdit {
        ProposedEdit { operation: Operation::Create, path: path.into(), old: String::new(), new: new.into() }
    }

    #[test]
    fn edits_apply_in_order_to_the_current_content() {
        let (_dir, root) = root();
        std::fs::create_dir(root.join("docs")).unwrap();
        let snap = snapshot(&[("b.txt", "one\ntwo\n"), ("a.txt", "keep\n"), ("c.txt", "same\n")]);
        let edits =
            [replace("b.txt", "two", "2"), replace("b.txt", "one\n2", "1\n2"), create_edit("docs/new.md", "# New\n")];
        let out = materialise(&root, &snap, &edits).unwrap();
        assert!(out.warnings.is_empty());
        assert_eq!(
            out.changes,
            vec![
                FileChange {
                    path: "b.txt".into(),
                    operation: Operation::Replace,
                    before: Some("one\ntwo\n".into()),
                    after: "1\n2\n".into(),
                    mode: 0o640,
                },
                FileChange {
                    path: "docs/new.md".into(),
                    operation: Operation::Create,
                    before: None,
                    after: "# New\n".into(),
                    mode: CREATE_MODE,
                },
            ]
        );
    }

    #[test]
    fn old_text_that_does_not_occur_is_refused() {
        let (_dir, root) = root();
        let snap = snapshot(&[("a.txt", "alpha\n")]);
        let error = materialise(&root, &snap, &[replace("a.txt", "beta", "gamma")]).unwrap_err();
        assert!(matches!(error, EditError::NoMatch { index: 0, .. }));
        assert!(error.to_string().starts_with("edits[0] for \"a.txt\": old text must match exactly once"), "{error}");
        // The first edit changed the text the second one looks for.
        let edits = [replace("a.txt", "alpha", "beta"), replace("a.txt", "alpha", "x")];
        assert!(matches!(materialise(&root, &snap, &edits), Err(EditError::NoMatch { index: 1, .. })));
    }

    #[test]
    fn several_matches_report_their_start_lines() {
        let (_dir, root) = root();
        let snap = snapshot(&[("a.txt", "a\nport: 80\nb\nport: 80\nport: 80\n")]);
        let error = materialise(&root, &snap, &[replace("a.txt", "port: 80", "port: 8080")]).unwrap_err();
        assert!(matches!(&error, EditError::Ambiguous { matches: 3, lines, .. } if *lines == vec![2, 4, 5]));
        assert!(error.to_string().contains("matches=3 matching_start_lines=[2, 4, 5]"), "{error}");
        // Overlapping occurrences are not unique either.
        let snap = snapshot(&[("a.txt", "x\naaa\n")]);
        let error = materialise(&root, &snap, &[replace("a.txt", "aa", "b")]).unwrap_err();
        assert!(matches!(&error, EditError::Ambiguous { matches: 2, lines, .. } if *lines == vec![2, 2]));
        // At most eight lines are listed.
        let snap = snapshot(&[("a.txt", &"x\n".repeat(10))]);
        let error = materialise(&root, &snap, &[replace("a.txt", "x", "y")]).unwrap_err();
        assert!(
            matches!(&error, EditError::Ambiguous { matches: 10, lines, .. } if *lines == (1..=8).collect::<Vec<_>>())
        );
    }

    #[test]
    fn no_op_edits_are_dropped_with_a_warning() {
        let (_dir, root) = root();
        let snap = snapshot(&[("a.txt", "alpha\n")]);
        let edits = [replace("a.txt", "alpha", "alpha"), replace("a.txt", "alpha", "beta")];
        let out = materialise(&root, &snap, &edits).unwrap();
        assert_eq!(
            out.warnings,
            vec!["ignored no-op edits[0] for \"a.txt\" because old and new are identical".to_owned()]
        );
        assert_eq!(out.changes[0].after, "beta\n");
    }

    #[test]
    fn only_no_op_edits_are_an_error_listing_them() {
        let (_dir, root) = root();
        let snap = snapshot(&[("a.txt", "alpha\n"), ("b.txt", "beta\n")]);
        let edits = [replace("a.txt", "alpha", "alpha"), replace("b.txt", "nope", "nope")];
        let error = materialise(&root, &snap, &edits).unwrap_err();
        assert_eq!(
            error.to_string(),
            "no effective changes after ignoring no-op edits (edits[0] for \"a.txt\", edits[1] for \"b.txt\"): old and new are identical; propose edits that change something"
        );
        assert!(matches!(materialise(&root, &snap, &[]), Err(EditError::NoEdits)));
    }

    #[test]
    fn edits_that_cancel_out_are_refused() {
        let (_dir, root) = root();
        let snap = snapshot(&[("a.txt", "alpha\n")]);
        let edits = [replace("a.txt", "alpha", "beta"), replace("a.txt", "beta", "alpha")];
        assert!(matches!(materialise(&root, &snap, &edits), Err(EditError::Unchanged { path }) if path == "a.txt"));
    }

    #[test]
    fn replace_rules() {
        let (_dir, root) = root();
        std::fs::write(root.join("other.txt"), "x").unwrap();
        let snap = snapshot(&[("a.txt", "alpha\n")]);
        let cases = [
            (replace("other.txt", "x", "y"), "NotInSnapshot"),
            (replace("a.txt", "", "y"), "EmptyOld"),
            (replace("a.txt", "alpha", "a\0b"), "Nul"),
            (replace("a.txt", "alpha", &"x".repeat(MAX_FILE_BYTES)), "TooLarge"),
            (replace("../a.txt", "alpha", "b"), "Escapes"),
            (replace("./a.txt", "alpha", "b"), "NotCanonical"),
            (replace("/a.txt", "alpha", "b"), "Absolute"),
        ];
        for (edit, expected) in cases {
            let error = materialise(&root, &snap, &[edit]).unwrap_err();
            assert!(format!("{error:?}").contains(expected), "{error:?} should be {expected}");
            assert!(error.to_string().starts_with("edits[0] for "), "{error}");
        }
        // A file created by an earlier edit is not a snapshot file.
        let edits = [create_edit("new.txt", "a\n"), replace("new.txt", "a", "b")];
        assert!(matches!(materialise(&root, &snap, &edits), Err(EditError::NotInSnapshot { index: 1, .. })));
    }

    #[test]
    fn create_rules() {
        let (_dir, root) = root();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("on-disk.txt"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("out")).unwrap();
        std::os::unix::fs::symlink(root.join("sub"), root.join("alias")).unwrap();
        let snap = snapshot(&[("a.txt", "alpha\n")]);
        let with_old = ProposedEdit { old: "x".into(), ..create_edit("n.txt", "y") };
        let cases: Vec<(Vec<ProposedEdit>, &str)> = vec![
            (vec![create_edit("a.txt", "y")], "CreateExists"),
            (vec![create_edit("on-disk.txt", "y")], "CreateExists"),
            (vec![create_edit("sub/n.txt", "y"), create_edit("sub/n.txt", "z")], "CreateTwice"),
            (vec![create_edit("sub/n.txt", "y"), create_edit("alias/n.txt", "z")], "CreateTwice"),
            (vec![create_edit("missing/n.txt", "y")], "Missing(\"missing\")"),
            (vec![create_edit("out/n.txt", "y")], "Outside"),
            (vec![create_edit(".env", "TOKEN=x")], "SecretName"),
            (vec![with_old], "CreateWithOld"),
            (vec![create_edit("n.txt", "")], "EmptyNew"),
            (vec![create_edit("n.txt", "a\0")], "Nul"),
            (vec![create_edit("n.txt", &"x".repeat(MAX_FILE_BYTES + 1))], "TooLarge"),
        ];
        for (edits, expected) in cases {
            let error = materialise(&root, &snap, &edits).unwrap_err();
            assert!(format!("{error:?}").contains(expected), "{error:?} should be {expected}");
        }
        let error =
            materialise(&root, &snap, &[create_edit("sub/n.txt", "y"), create_edit("alias/n.txt", "z")]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "edits[1] for \"alias/n.txt\": the file is already created by edits[0]; create each file once with its full content"
        );
        let error = materialise(&root, &snap, &[create_edit("missing/n.txt", "y")]).unwrap_err();
        assert_eq!(
            error.to_string(),
            "edits[0] for \"missing/n.txt\": path \"missing\" does not exist in the workspace"
        );
        // Nothing was written.
        assert!(!root.join("sub/n.txt").exists());
    }

    #[test]
    fn final_contents_are_bounded_in_total() {
        let (_dir, root) = root();
        let big = "x".repeat(MAX_FILE_BYTES - 10);
        let snap = snapshot(&[("a", &big), ("b", &big), ("c", &big), ("d", &big)]);
        let error = materialise(&root, &snap, &[create_edit("e", &"y".repeat(100))]).unwrap_err();
        assert!(matches!(error, EditError::TotalTooLarge { bytes } if bytes == 4 * (MAX_FILE_BYTES - 10) + 100));
        assert!(materialise(&root, &snap, &[create_edit("e", &"y".repeat(40))]).is_ok());
    }
}
