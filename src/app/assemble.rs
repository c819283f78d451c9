//! Assembly of the run engine from settings, shared by `serve` and `ask`.

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::{Context, Result};

use crate::audit::{AuditLog, AuditStorage};
use crate::catalog::CatalogStore;
use crate::catalog::skills_dir::SkillSource;
use crate::config::Settings;
use crate::engine::instructions::SystemInstructions;
use crate::engine::retrieval::Retriever;
use crate::engine::run::Engine;
use crate::journal::JournalOptions;
use crate::knowledge::bases::KnowledgeBases;
use crate::llm::{LlmClient, LlmConfig};
use crate::tenancy::Tenancy;
use crate::tools::{RegistryBuilder, ToolLimits};

/// The skills in force: an explicitly configured directory must exist; at the default
/// (`skills`), the directory when it is one under the working directory, else the skills
/// built into the binary.
pub fn skills(settings: &Settings) -> Result<Option<SkillSource>> {
    let Some(dir) = settings.skills_dir.as_deref().map(PathBuf::from) else { return Ok(None) };
    if dir.is_dir() {
        return Ok(Some(SkillSource::Dir(dir)));
    }
    match settings.origin("skills_dir") {
        crate::config::Source::Default => {
            let dir = std::path::absolute(&dir).unwrap_or(dir);
            tracing::info!(dir = %dir.display(), "no skills directory here; the built-in skills are loaded");
            Ok(Some(SkillSource::BuiltIn))
        }
        source => anyhow::bail!(
            "skills_dir {} (from {source}) is not a directory; fix the path or set it empty to disable",
            dir.display()
        ),
    }
}

/// The system instructions in force: a configured file must load; at the default
/// (`instructions/SYSTEM.md`), the file when it is one under the working directory, else the
/// instructions built into the binary.
pub fn instructions(settings: &Settings) -> Result<SystemInstructions> {
    let path = &settings.system_instructions;
    if settings.origin("system_instructions") == crate::config::Source::Default && !path.is_file() {
        return Ok(SystemInstructions::built_in());
    }
    Ok(SystemInstructions::load(path)?)
}

/// Where the audit journal lives under the data directory.
pub fn audit_path(settings: &Settings) -> PathBuf {
    settings.data_dir.join("audit").join("akritas.jsonl")
}

/// The model client: base URL, key from the named environment variable, timeout,
/// SYSTEM.md prepended to every request.
pub fn llm_client(settings: &Settings, instructions: &SystemInstructions) -> Result<LlmClient> {
    let http = crate::outbound::client(settings.request_timeout).context("building the HTTP client")?;
    let api_key =
        std::env::var(&settings.upstream_api_key_env).ok().map(|v| v.trim().to_string()).filter(|v| !v.is_empty());
    let config = LlmConfig {
        base_url: settings.base_url.clone(),
        api_key,
        model: settings.upstream_model.clone(),
        timeout: settings.request_timeout,
        context_tokens: settings.model_context_tokens,
        max_response_bytes: crate::llm::DEFAULT_MAX_RESPONSE_BYTES,
        system_instructions: Some(Arc::from(instructions.text())),
        protocol: settings.model_protocol,
    };
    LlmClient::new(config, http).context("configuring the model client (base_url, upstream_api_key_env)")
}

/// Opens the audit journal (blocking: reads the index snapshot and replays the records after it).
pub fn open_audit(settings: &Settings) -> Result<Arc<AuditLog>> {
    let path = audit_path(settings);
    let storage = audit_storage(settings)?;
    let audit =
        AuditLog::open_with(&path, storage).with_context(|| format!("opening the audit journal {}", path.display()))?;
    Ok(Arc::new(audit))
}

/// How the audit is stored: segments, seals, snapshots and retention from the settings.
pub fn audit_storage(settings: &Settings) -> Result<AuditStorage> {
    Ok(AuditStorage {
        journal: JournalOptions {
            segment_bytes: settings.journal_segment_bytes,
            segment_age: Some(settings.journal_segment_age),
            mac_key: audit_key(settings)?,
            ..JournalOptions::default()
        },
        snapshot_records: settings.snapshot_records,
        retention: Some(settings.audit_retention).filter(|age| !age.is_zero()),
    })
}

/// The audit key from `audit_key_env`: refused when the variable is unset or shorter than
/// 32 bytes (a short key makes the seals guessable).
pub fn audit_key(settings: &Settings) -> Result<Option<Arc<[u8]>>> {
    let Some(name) = &settings.audit_key_env else { return Ok(None) };
    let value = std::env::var(name).map(|v| v.trim().to_string()).unwrap_or_default();
    if value.len() < 32 {
        anyhow::bail!(
            "audit_key_env names {name}, which is unset or shorter than 32 bytes; set it to a random secret \
             (for example `openssl rand -hex 32`) or unset audit_key_env"
        );
    }
    Ok(Some(Arc::from(value.into_bytes())))
}

/// The engine; tools arrive later from the MCP adapters, runbooks from `knowledge`.
pub fn engine(
    settings: &Settings,
    llm: LlmClient,
    audit: Arc<AuditLog>,
    catalog: CatalogStore,
    knowledge: &KnowledgeBases,
) -> Engine {
    let tools = RegistryBuilder::new(ToolLimits::default()).build();
    let retriever: Arc<dyn Retriever> = Arc::new(knowledge.clone());
    Engine::new(crate::app::narrow::engine(settings), llm, tools, Some(audit), catalog, Some(retriever))
        .with_tenancy(Tenancy::new(settings.shared_namespaces.iter().cloned()))
}

/// The knowledge bases with the configured excerpt size.
pub fn knowledge_bases(settings: &Settings) -> KnowledgeBases {
    KnowledgeBases::new(settings.result_runes as usize, Some(settings.data_dir.join("knowledge")))
}
