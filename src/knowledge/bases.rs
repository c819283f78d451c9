//! KnowledgeBase resources → in-memory indexes, rebuilt in the background when
//! their content changes and swapped atomically; the run engine searches them
//! (automatic retrieval and `knowledge.search`). Runbooks guide; they never
//! authorize anything. A directory is read only where the service's
//! [`ResourcePolicy`] allows (under `knowledge_roots`, never the data directory).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

use futures_util::future::BoxFuture;
use serde::{Serialize, Serializer};
use serde_json::{Value, json};

use super::corpus::{self, CorpusError, Document, ImportOptions};
use super::index::{ChunkingParams, IndexError, IndexStats, KnowledgeIndex, content_sha256};
use crate::catalog::policy::{PathError, ResourcePolicy};
use crate::catalog::readiness::reasons;
use crate::catalog::{Catalog, ObjectKey};
use crate::engine::retrieval::{RetrievalError, Retrieved, Retriever};
use crate::resources::knowledge_base::KnowledgeBaseSpec;
use crate::resources::{Kind, Resource};
use crate::tenancy::Scope;
use crate::text::prefix_chars;

/// Most hits a single search returns.
pub const MAX_HITS: usize = 20;
/// Characters of the content hash that name an index version (directory and `versions`).
const VERSION_CHARS: usize = 16;

/// Why a knowledge base has no (new) index.
#[derive(Debug, thiserror::Error)]
pub enum BaseError {
    /// A directory or git source could not be imported.
    #[error("sources[{index}]: {source}")]
    Import {
        /// Position of the source in `spec.sources`.
        index: usize,
        /// What importing that source reported (no such root, an I/O failure, nothing accepted).
        source: CorpusError,
    },
    /// A ConfigMap source names a ConfigMap the Catalog does not hold.
    #[error("sources[{index}]: ConfigMap {namespace}/{name} not found")]
    ConfigMapNotFound {
        /// Position of the source in `spec.sources`.
        index: usize,
        /// The ConfigMap's namespace.
        namespace: String,
        /// The ConfigMap's name.
        name: String,
    },
    /// A git source names a Workspace the Catalog does not hold.
    #[error("sources[{index}]: Workspace {workspace} not found")]
    WorkspaceNotFound {
        /// Position of the source in `spec.sources`.
        index: usize,
        /// The Workspace.
        workspace: ObjectKey,
    },
    /// A git source names a Workspace that is a remote, not a local path.
    #[error("sources[{index}]: Workspace {name} is a git remote; index a path workspace instead")]
    RemoteWorkspace {
        /// Position of the source in `spec.sources`.
        index: usize,
        /// The Workspace's name.
        name: String,
    },
    /// A directory the policy does not let resources read, or that cannot be resolved.
    #[error("{}", error.at(&format!("spec.sources[{index}].{field}")))]
    Path {
        /// Position of the source in `spec.sources`.
        index: usize,
        /// The field of that source naming the directory (`directory.path`, `git.path`).
        field: &'static str,
        /// Why the policy refused the directory, or why it could not be resolved.
        error: PathError,
    },
    /// Indexing failed.
    #[error(transparent)]
    Index(#[from] IndexError),
}

impl BaseError {
    /// The condition reason of a knowledge base that failed this way.
    pub fn reason(&self) -> &'static str {
        match self {
            BaseError::Path { error, .. } => error.reason(),
            _ => reasons::INDEX_FAILED,
        }
    }
}

/// Status carries the message.
impl Serialize for BaseError {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

struct Loaded {
    name: String,
    index: KnowledgeIndex,
    sha: String,
}

/// The loaded knowledge bases. Cheap to clone.
#[derive(Clone)]
pub struct KnowledgeBases {
    loaded: Arc<RwLock<BTreeMap<ObjectKey, Arc<Loaded>>>>,
    excerpt_chars: usize,
    storage: Option<PathBuf>,
}

/// What a refresh did for one knowledge base.
#[derive(Debug)]
pub struct Refreshed {
    /// The resource.
    pub key: ObjectKey,
    /// Stats of the index in force, or why it could not be built.
    pub outcome: Result<IndexStats, BaseError>,
    /// Files skipped by the import, with reasons.
    pub skipped: Vec<String>,
    /// Whether a new index was built.
    pub rebuilt: bool,
}

impl KnowledgeBases {
    /// No knowledge base yet; excerpts of at most `excerpt_chars` characters.
    /// With `storage`, indexes live on disk there (memory-mapped, reused across
    /// restarts when the content is unchanged); without, in memory.
    pub fn new(excerpt_chars: usize, storage: Option<PathBuf>) -> Self {
        Self { loaded: Arc::default(), excerpt_chars, storage }
    }

    /// Opens the stored index of this content, or builds it.
    fn index_for(
        &self,
        key: &ObjectKey,
        documents: &[Document],
        params: ChunkingParams,
        sha: &str,
    ) -> Result<(KnowledgeIndex, bool), IndexError> {
        let Some(storage) = &self.storage else {
            return KnowledgeIndex::build_in_ram(documents, params).map(|i| (i, true));
        };
        let base = storage.join(format!("{}.{}", key.namespace, key.name));
        let dir = base.join(prefix_chars(sha, VERSION_CHARS));
        if let Ok(index) = KnowledgeIndex::open(&dir)
            && index.stats().content_sha256 == sha
        {
            return Ok((index, false));
        }
        // A partial build (no metadata) or another content: start over.
        let _ = std::fs::remove_dir_all(&dir);
        let index = KnowledgeIndex::build_on_disk(&dir, documents, params, None)?;
        // Older versions of this base are no longer needed (open mappings stay valid).
        if let Ok(entries) = std::fs::read_dir(&base) {
            for entry in entries.filter_map(Result::ok).filter(|e| e.path() != dir) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        Ok((index, true))
    }

    /// Reads every KnowledgeBase's sources (directories only where `policy` allows)
    /// and rebuilds the indexes whose content changed; drops removed ones. Blocking
    /// (file IO, indexing).
    pub fn refresh(&self, catalog: &Catalog, policy: &ResourcePolicy) -> Vec<Refreshed> {
        let mut results = Vec::new();
        let mut next = BTreeMap::new();
        let current = self.loaded.read().unwrap_or_else(|p| p.into_inner()).clone();
        for (key, entry) in catalog.of_kind(Kind::KnowledgeBase) {
            let Resource::KnowledgeBase(base) = entry.resource.as_ref() else { continue };
            let name = format!("{}/{}", key.namespace, key.name);
            let params = ChunkingParams {
                chunk_chars: base.spec.chunking.chunk_runes as usize,
                overlap_chars: base.spec.chunking.overlap_runes as usize,
            };
            let found = documents(catalog, key, &base.spec, entry.base_dir.as_deref(), &name, policy);
            let (documents, skipped) = match found {
                Ok(found) => found,
                Err(error) => {
                    keep_previous(&current, key, &mut next);
                    results.push(Refreshed {
                        key: key.clone(),
                        outcome: Err(error),
                        skipped: Vec::new(),
                        rebuilt: false,
                    });
                    continue;
                }
            };
            let sha = content_sha256(&documents, params);
            if let Some(previous) = current.get(key).filter(|loaded| loaded.sha == sha) {
                next.insert(key.clone(), previous.clone());
                results.push(Refreshed {
                    key: key.clone(),
                    outcome: Ok(previous.index.stats()),
                    skipped,
                    rebuilt: false,
                });
                continue;
            }
            match self.index_for(key, &documents, params, &sha) {
                Ok((index, rebuilt)) => {
                    let stats = index.stats();
                    tracing::info!(knowledge_base = %name, documents = stats.documents, chunks = stats.chunks, rebuilt, "knowledge base loaded");
                    next.insert(key.clone(), Arc::new(Loaded { name, index, sha }));
                    results.push(Refreshed { key: key.clone(), outcome: Ok(stats), skipped, rebuilt });
                }
                Err(error) => {
                    keep_previous(&current, key, &mut next);
                    results.push(Refreshed { key: key.clone(), outcome: Err(error.into()), skipped, rebuilt: false });
                }
            }
        }
        if let Some(storage) = &self.storage
            && let Ok(entries) = std::fs::read_dir(storage)
        {
            // Removed knowledge bases leave no index behind.
            let kept: Vec<String> = next.keys().map(|k| format!("{}.{}", k.namespace, k.name)).collect();
            for entry in entries.filter_map(Result::ok) {
                if !kept.contains(&entry.file_name().to_string_lossy().into_owned()) {
                    let _ = std::fs::remove_dir_all(entry.path());
                }
            }
        }
        *self.loaded.write().unwrap_or_else(|p| p.into_inner()) = next;
        results
    }

    /// Searches every knowledge base and merges the hits by score.
    pub fn search_all(&self, query: &str, top_k: usize) -> Result<Retrieved, IndexError> {
        self.search_where(|_| true, query, top_k)
    }

    /// Searches the knowledge bases of the namespaces `visible` accepts and merges
    /// the hits by score.
    pub fn search_where(
        &self,
        visible: impl Fn(&str) -> bool,
        query: &str,
        top_k: usize,
    ) -> Result<Retrieved, IndexError> {
        let loaded: Vec<Arc<Loaded>> = self
            .loaded
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .filter(|(key, _)| visible(&key.namespace))
            .map(|(_, base)| base.clone())
            .collect();
        let top_k = top_k.clamp(1, MAX_HITS);
        let mut hits = Vec::new();
        let mut versions = BTreeMap::new();
        for base in &loaded {
            let found = base.index.search_with_excerpt(query, top_k, self.excerpt_chars)?;
            versions.insert(base.name.clone(), prefix_chars(&base.sha, VERSION_CHARS).to_owned());
            hits.extend(found.into_iter().map(|hit| (base.name.clone(), hit)));
        }
        hits.sort_by(|a, b| b.1.score.total_cmp(&a.1.score));
        hits.truncate(top_k);
        let documents = hits.iter().map(|(_, hit)| (hit.document_id.clone(), hit.title.clone())).collect();
        let searched: BTreeMap<&String, &String> = versions.iter().collect();
        let results: Vec<Value> = hits
            .iter()
            .map(|(base, hit)| {
                json!({
                    "knowledge_base": base,
                    "document": hit.document_id,
                    "title": hit.title,
                    "source": hit.source,
                    "url": hit.url,
                    "score": hit.score,
                    "chunk": hit.chunk,
                    "excerpt": hit.excerpt,
                })
            })
            .collect();
        let output = json!({ "results": results, "knowledge_bases": searched });
        Ok(Retrieved { output, documents, versions })
    }
}

fn keep_previous(
    current: &BTreeMap<ObjectKey, Arc<Loaded>>,
    key: &ObjectKey,
    next: &mut BTreeMap<ObjectKey, Arc<Loaded>>,
) {
    if let Some(previous) = current.get(key) {
        next.insert(key.clone(), previous.clone());
    }
}

impl Retriever for KnowledgeBases {
    fn is_available(&self, scope: &Scope) -> bool {
        self.loaded.read().unwrap_or_else(|p| p.into_inner()).keys().any(|key| scope.sees(&key.namespace))
    }

    fn search(
        &self,
        scope: &Scope,
        query: &str,
        top_k: usize,
    ) -> BoxFuture<'static, Result<Retrieved, RetrievalError>> {
        // BM25 over in-memory indexes takes well under a millisecond: no need to leave the task.
        let result = self.search_where(|namespace| scope.sees(namespace), query, top_k).map_err(RetrievalError::new);
        Box::pin(async move { result })
    }
}

/// The first directory source of `spec` the policy does not let a knowledge base read (or that
/// does not exist), as the index build would refuse it; git sources are judged when cloned.
pub fn directory_problem(
    spec: &KnowledgeBaseSpec,
    base_dir: Option<&Path>,
    policy: &ResourcePolicy,
) -> Option<BaseError> {
    spec.sources.iter().enumerate().find_map(|(index, source)| {
        let directory = source.directory.as_ref()?;
        let error = policy.readable_dir(&resolve(base_dir, &directory.path), base_dir.is_some()).err()?;
        Some(BaseError::Path { index, field: "directory.path", error })
    })
}

/// The documents of one knowledge base and the files its import skipped.
fn documents(
    catalog: &Catalog,
    key: &ObjectKey,
    spec: &KnowledgeBaseSpec,
    base_dir: Option<&Path>,
    name: &str,
    policy: &ResourcePolicy,
) -> Result<(Vec<Document>, Vec<String>), BaseError> {
    let mut documents = Vec::new();
    let mut skipped = Vec::new();
    for (index, source) in spec.sources.iter().enumerate() {
        if let Some(directory) = &source.directory {
            let root = policy
                .readable_dir(&resolve(base_dir, &directory.path), base_dir.is_some())
                .map_err(|error| BaseError::Path { index, field: "directory.path", error })?;
            let options = ImportOptions {
                source: name.to_string(),
                extensions: directory.extensions.clone(),
                ..ImportOptions::default()
            };
            let report = corpus::import(&root, &options).map_err(|source| BaseError::Import { index, source })?;
            skipped.extend(report.skipped.iter().map(|s| format!("{}: {}", s.path, s.reason)));
            documents.extend(report.documents);
        } else if let Some(config_map) = &source.config_map {
            let data = catalog.config_maps.get(&(key.namespace.clone(), config_map.name.clone())).ok_or_else(|| {
                BaseError::ConfigMapNotFound { index, namespace: key.namespace.clone(), name: config_map.name.clone() }
            })?;
            for (data_key, text) in data {
                if config_map.keys.is_empty() || config_map.keys.contains(data_key) {
                    let id = format!("configmap/{}/{data_key}", config_map.name);
                    documents.push(Document::from_text(id, name.to_string(), None, text, data_key));
                }
            }
        } else if let Some(inline) = &source.inline {
            let mut document = Document::from_text(
                inline.name.clone(),
                name.to_string(),
                inline.url.clone(),
                &inline.content,
                &inline.name,
            );
            if let Some(title) = &inline.title {
                document.title = title.clone();
            }
            documents.push(document);
        } else if let Some(git) = &source.git {
            let workspace =
                ObjectKey { kind: Kind::Workspace, namespace: key.namespace.clone(), name: git.workspace.clone() };
            let Some(entry) = catalog.entries.get(&workspace) else {
                return Err(BaseError::WorkspaceNotFound { index, workspace });
            };
            let Resource::Workspace(ws) = entry.resource.as_ref() else { continue };
            let path = ws
                .spec
                .source
                .path
                .as_ref()
                .ok_or_else(|| BaseError::RemoteWorkspace { index, name: git.workspace.clone() })?;
            let root = policy
                .readable_dir(&resolve(entry.base_dir.as_deref(), path).join(&git.path), entry.base_dir.is_some())
                .map_err(|error| BaseError::Path { index, field: "git.path", error })?;
            let options = ImportOptions { source: name.to_string(), ..ImportOptions::default() };
            let report = corpus::import(&root, &options).map_err(|source| BaseError::Import { index, source })?;
            skipped.extend(report.skipped.iter().map(|s| format!("{}: {}", s.path, s.reason)));
            documents.extend(report.documents);
        }
    }
    // Ids must be unique across sources of one base.
    let mut seen = std::collections::BTreeSet::new();
    documents.retain(|d| seen.insert(d.id.clone()));
    Ok((documents, skipped))
}

fn resolve(base_dir: Option<&Path>, path: &str) -> PathBuf {
    match base_dir {
        Some(base) if !Path::new(path).is_absolute() => base.join(path),
        _ => PathBuf::from(path),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> ObjectKey {
        ObjectKey { kind: Kind::KnowledgeBase, namespace: "ops".into(), name: "kb".into() }
    }

    fn spec(sources: Value) -> KnowledgeBaseSpec {
        serde_json::from_value(json!({ "sources": sources })).unwrap()
    }

    fn documents_of(sources: Value) -> Result<(Vec<Document>, Vec<String>), BaseError> {
        documents(&Catalog::default(), &key(), &spec(sources), None, "ops/kb", &ResourcePolicy::default())
    }

    #[test]
    fn inline_documents_keep_their_title_and_ids_stay_unique() {
        let (docs, skipped) = documents_of(json!([
            {"inline": {"name": "tls.md", "title": "Certificates", "url": "https://wiki/tls", "content": "# Other\nrenew"}},
            {"inline": {"name": "tls.md", "content": "a second document with the same id"}},
            {"inline": {"name": "dns.md", "content": "# CoreDNS\nndots"}},
        ]))
        .unwrap();
        let summary: Vec<(&str, &str, &str)> =
            docs.iter().map(|d| (d.id.as_str(), d.title.as_str(), d.source.as_str())).collect();
        assert_eq!(summary, [("tls.md", "Certificates", "ops/kb"), ("dns.md", "CoreDNS", "ops/kb")]);
        assert_eq!(docs[0].url.as_deref(), Some("https://wiki/tls"));
        assert!(skipped.is_empty());
    }

    #[test]
    fn missing_sources_are_reported_by_position() {
        let inline = json!({"inline": {"name": "a.md", "content": "a"}});
        let err = documents_of(json!([inline, {"configMap": {"name": "extra"}}])).unwrap_err();
        assert_eq!(err.to_string(), "sources[1]: ConfigMap ops/extra not found");
        let err = documents_of(json!([{"git": {"workspace": "repo", "path": "docs"}}])).unwrap_err();
        assert!(
            matches!(&err, BaseError::WorkspaceNotFound { index: 0, workspace } if workspace.name == "repo"),
            "{err}"
        );
        let err = documents_of(json!([inline, inline, {"directory": {"path": "/nonexistent/runbooks"}}])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.sources[2].directory.path: /nonexistent/runbooks does not exist or cannot be read (No such file or \
             directory (os error 2)); create the directory or correct spec.sources[2].directory.path"
        );
        assert_eq!(err.reason(), reasons::PATH_NOT_FOUND);
    }

    #[test]
    fn directories_are_read_only_where_the_policy_allows() {
        let work = tempfile::tempdir().unwrap();
        let (root, data, outside) = (work.path().join("root"), work.path().join("data"), work.path().join("outside"));
        for dir in [&root, &data, &outside] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::write(
                dir.join("doc.md"),
                format!("# Disk full\n{}", "Free space and grow the volume. ".repeat(8)),
            )
            .unwrap();
        }
        std::os::unix::fs::symlink(&outside, root.join("escape")).unwrap();
        let policy =
            ResourcePolicy { knowledge_roots: vec![root.clone()], data_dir: data.clone(), ..Default::default() };
        let read = |path: &Path| {
            let sources = json!([{"directory": {"path": path.display().to_string()}}]);
            documents(&Catalog::default(), &key(), &spec(sources), None, "ops/kb", &policy)
        };
        assert_eq!(read(&root).unwrap().0.len(), 1);
        for refused in [root.join("escape"), data, outside] {
            let error = read(&refused).unwrap_err();
            assert_eq!(error.reason(), reasons::PATH_NOT_ALLOWED, "{error}");
        }
        assert_eq!(read(&root.join("missing")).unwrap_err().reason(), reasons::PATH_NOT_FOUND);
    }

    #[test]
    fn a_base_error_serialises_as_its_message() {
        let err = BaseError::RemoteWorkspace { index: 3, name: "repo".into() };
        assert_eq!(
            serde_json::to_value(&err).unwrap(),
            json!("sources[3]: Workspace repo is a git remote; index a path workspace instead")
        );
        let err = BaseError::from(IndexError::Empty);
        assert_eq!(serde_json::to_value(&err).unwrap(), json!("no indexable text in the documents"));
    }

    #[test]
    fn search_merges_bases_by_score_and_names_their_versions() {
        let bases = KnowledgeBases::new(200, None);
        let docs = documents_of(json!([
            {"inline": {"name": "disk.md", "content": "# Disk full\ndisk usage grows, disk disk"}},
            {"inline": {"name": "cpu.md", "content": "# High CPU\ncpu steal"}},
        ]))
        .unwrap()
        .0;
        let params = ChunkingParams::default();
        let sha = content_sha256(&docs, params);
        let (index, rebuilt) = bases.index_for(&key(), &docs, params, &sha).unwrap();
        assert!(rebuilt);
        bases
            .loaded
            .write()
            .unwrap()
            .insert(key(), Arc::new(Loaded { name: "ops/kb".into(), index, sha: sha.clone() }));
        let found = bases.search_all("disk", 0).unwrap();
        assert_eq!(found.output["results"].as_array().map(Vec::len), Some(1), "top_k is at least 1");
        assert_eq!(found.output["results"][0]["document"], "disk.md");
        assert_eq!(found.versions["ops/kb"], sha[..VERSION_CHARS]);
        assert_eq!(found.documents, [("disk.md".to_owned(), "Disk full".to_owned())]);
        assert!(matches!(bases.search_all("!!!", 5), Err(IndexError::EmptyQuery)));
    }
}
