//! Standalone resource source: manifest directories (and the skills directory),
//! validated with the same pipeline as Kubernetes objects and merged with the last
//! good versions (see [`super::merge`]).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecursiveMode, Watcher};
use tokio_util::sync::CancellationToken;

use super::manifest::{self, ManifestFile};
use super::merge::{LastGood, Reload};
use super::scan::{Scan, Scanned, cross_check, scan_value};
use super::skills_dir::{self, SkillSource};
use super::status::{Problem, StatusBoard};
use super::{CatalogStore, ObjectKey};
use crate::resources::Kind;
use crate::resources::validate::{FieldError, parse_manifest};

/// Reads and validates every manifest under the directories (and the skills
/// directory, if any), then runs the cross-object checks (duplicates, references).
pub fn scan(dirs: &[PathBuf], skills_dir: Option<&Path>) -> Scan {
    scan_from(dirs, skills_dir.map(|d| SkillSource::Dir(d.to_path_buf())).as_ref())
}

/// [`scan`], with the skills from a directory or built into the binary.
pub fn scan_from(dirs: &[PathBuf], skills: Option<&SkillSource>) -> Scan {
    let mut result = Scan::default();
    match manifest::list_files(dirs) {
        Ok(files) => {
            for path in files {
                scan_file(manifest::read_file(&path), &mut result);
            }
        }
        Err(error) => result.problems.push(Problem { location: dirs_label(dirs), object: None, error }),
    }
    match skills {
        Some(SkillSource::Dir(dir)) => scan_skills_dir(skills_dir::read(dir), dir, &mut result),
        Some(SkillSource::BuiltIn) => scan_skills_dir(Ok(skills_dir::built_in()), Path::new("(built-in)"), &mut result),
        None => {}
    }
    cross_check(&mut result);
    result
}

fn scan_skills_dir(read: Result<Vec<skills_dir::SkillFile>, String>, dir: &Path, out: &mut Scan) {
    let files = match read {
        Ok(files) => files,
        Err(error) => {
            out.problems.push(Problem { location: dir.display().to_string(), object: None, error });
            return;
        }
    };
    // Skills defined as resources win over directory skills of the same name.
    let declared: BTreeSet<String> =
        out.objects.iter().filter(|o| o.key.kind == Kind::Skill).map(|o| o.key.name.clone()).collect();
    for file in files {
        if declared.contains(&file.name) {
            tracing::debug!(skill = %file.name, path = %file.path.display(), "directory skill shadowed by a Skill resource");
            continue;
        }
        let result = file.manifest.map_err(|error| vec![FieldError::new("", error)]).and_then(parse_manifest);
        out.objects.push(Scanned {
            key: ObjectKey { kind: Kind::Skill, namespace: skills_dir::NAMESPACE.to_string(), name: file.name },
            file: file.path,
            index: 0,
            result,
            from_skills_dir: true,
        });
    }
}

fn dirs_label(dirs: &[PathBuf]) -> String {
    dirs.iter().map(|d| d.display().to_string()).collect::<Vec<_>>().join(",")
}

fn scan_file(file: ManifestFile, out: &mut Scan) {
    let documents = match file.documents {
        Ok(documents) => documents,
        Err(error) => {
            out.problems.push(Problem { location: file.path.display().to_string(), object: None, error });
            out.unreadable.insert((file.path, None));
            return;
        }
    };
    for document in documents {
        let location = format!("{}:{}", file.path.display(), document.index);
        let value = match document.value {
            Ok(value) => value,
            Err(error) => {
                out.problems.push(Problem { location, object: None, error });
                out.unreadable.insert((file.path.clone(), Some(document.index)));
                continue;
            }
        };
        scan_value(value, &file.path, document.index, out);
    }
}

/// Every problem of a scan as `file:doc-index kind/name: field: reason` lines.
pub fn problem_lines(scan: &Scan) -> Vec<String> {
    let mut lines = Vec::new();
    for problem in &scan.problems {
        match &problem.object {
            Some(object) => lines.push(format!("{} {object}: {}", problem.location, problem.error)),
            None => lines.push(format!("{}: {}", problem.location, problem.error)),
        }
    }
    for object in &scan.objects {
        if let Err(errors) = &object.result {
            for error in errors {
                lines.push(format!("{} {}/{}: {error}", object.location(), object.key.kind.as_str(), object.key.name));
            }
        }
    }
    lines
}

/// The directory source: remembers the last good version of every object.
pub struct DirectorySource {
    dirs: Vec<PathBuf>,
    skills: Option<SkillSource>,
    last_good: LastGood,
}

impl DirectorySource {
    /// A source over the manifest directories and an optional skills directory
    /// (nothing loaded yet).
    pub fn new(dirs: Vec<PathBuf>, skills_dir: Option<PathBuf>) -> Self {
        Self::with_skills(dirs, skills_dir.map(SkillSource::Dir))
    }

    /// A source over the manifest directories and the skills from a directory or built in.
    pub fn with_skills(dirs: Vec<PathBuf>, skills: Option<SkillSource>) -> Self {
        Self { dirs, skills, last_good: LastGood::default() }
    }

    /// The directories watched.
    pub fn watched(&self) -> Vec<PathBuf> {
        let skills_dir = match &self.skills {
            Some(SkillSource::Dir(dir)) => Some(dir.clone()),
            _ => None,
        };
        self.dirs.iter().cloned().chain(skills_dir).collect()
    }

    /// Reads everything again and merges with the last good versions.
    pub fn reload(&mut self) -> Reload {
        let scan = scan_from(&self.dirs, self.skills.as_ref());
        self.last_good.merge(scan)
    }
}

/// How often the directories are rescanned even without file events (missed events,
/// network filesystems).
pub const RESCAN_INTERVAL: Duration = Duration::from_secs(10);
/// Quiet time after the last file change before reloading (editors write in several
/// steps): a burst of changes is one reload.
pub const DEBOUNCE: Duration = Duration::from_millis(300);
/// Longest a stream of changes delays the reload.
pub const MAX_DELAY: Duration = Duration::from_secs(2);

/// Whether a file event can change what the directories hold: a file or directory
/// created, written, renamed or removed (or events lost). Opening, reading, closing
/// and metadata changes cannot; reloading reads every file, so reacting to those
/// would reload forever.
pub fn changes_content(event: &notify::Event) -> bool {
    use notify::EventKind;
    use notify::event::ModifyKind;
    match event.kind {
        EventKind::Create(_) | EventKind::Remove(_) | EventKind::Any => true,
        EventKind::Modify(ModifyKind::Data(_) | ModifyKind::Name(_) | ModifyKind::Any) => true,
        EventKind::Modify(ModifyKind::Metadata(_) | ModifyKind::Other) | EventKind::Access(_) => false,
        EventKind::Other => event.need_rescan(),
    }
}

/// Watches the directories and reloads on change until cancelled.
pub async fn watch(mut source: DirectorySource, store: CatalogStore, board: StatusBoard, cancel: CancellationToken) {
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
    let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| match event {
        Ok(event) if changes_content(&event) => {
            let _ = tx.send(());
        }
        Ok(_) => {}
        Err(error) => tracing::debug!(%error, "file watch error; the periodic rescan covers it"),
    });
    let _watcher = match watcher {
        Ok(mut watcher) => {
            for dir in source.watched() {
                if let Err(error) = watcher.watch(&dir, RecursiveMode::Recursive) {
                    tracing::warn!(dir = %dir.display(), %error, "cannot watch resource directory; relying on periodic rescans");
                }
            }
            Some(watcher)
        }
        Err(error) => {
            tracing::warn!(%error, "file watching unavailable; relying on periodic rescans");
            None
        }
    };
    let mut rescan = tokio::time::interval(RESCAN_INTERVAL);
    rescan.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    rescan.tick().await;
    loop {
        let trigger = tokio::select! {
            _ = cancel.cancelled() => return,
            event = rx.recv() => {
                if event.is_none() || !settle(&mut rx, &cancel).await { return; }
                "change"
            }
            _ = rescan.tick() => "rescan",
        };
        tracing::debug!(trigger, "reloading resources");
        let result = tokio::task::spawn_blocking(move || {
            let reload = source.reload();
            (source, reload)
        })
        .await;
        match result {
            Ok((returned, reload)) => {
                source = returned;
                super::merge::apply(reload, &store, &board);
            }
            Err(error) => {
                tracing::error!(%error, "resource reload task failed; stopping the directory watch");
                return;
            }
        }
        rescan.reset();
    }
}

/// Waits until no change arrived for [`DEBOUNCE`] (at most [`MAX_DELAY`]); false when
/// cancelled or the watcher is gone.
async fn settle(rx: &mut tokio::sync::mpsc::UnboundedReceiver<()>, cancel: &CancellationToken) -> bool {
    let limit = tokio::time::Instant::now() + MAX_DELAY;
    loop {
        let quiet = (tokio::time::Instant::now() + DEBOUNCE).min(limit);
        tokio::select! {
            _ = cancel.cancelled() => return false,
            event = rx.recv() => if event.is_none() { return false; },
            _ = tokio::time::sleep_until(quiet) => return true,
        }
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{
        AccessKind, AccessMode, CreateKind, DataChange, Flag, MetadataKind, ModifyKind, RemoveKind, RenameMode,
    };
    use notify::{Event, EventKind};

    use super::*;

    #[test]
    fn only_events_that_change_content_trigger_a_reload() {
        let reloads = [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
            EventKind::Remove(RemoveKind::File),
        ];
        for kind in reloads {
            assert!(changes_content(&Event::new(kind)), "{kind:?}");
        }
        let ignored = [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Read),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
            EventKind::Other,
        ];
        for kind in ignored {
            assert!(!changes_content(&Event::new(kind)), "{kind:?}");
        }
        assert!(changes_content(&Event::new(EventKind::Other).set_flag(Flag::Rescan)), "lost events: rescan");
    }
}
