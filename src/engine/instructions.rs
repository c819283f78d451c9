//! `instructions/SYSTEM.md`: the operator's global instructions, prepended to the
//! first system message of every model request. Loaded once at start; any problem
//! stops the start with a message that says what to fix.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Largest instructions file.
pub const MAX_BYTES: u64 = 64 * 1024;

/// Why the instructions could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum InstructionsError {
    /// The file cannot be opened or read.
    #[error("system instructions {path}: {reason}; point --system-instructions at a readable file")]
    Read {
        /// The file as configured (`--system-instructions`), not canonicalised.
        path: PathBuf,
        /// The I/O error's message (not found, permission denied, ...).
        reason: String,
    },
    /// Not a regular file.
    #[error("system instructions {0}: not a regular file")]
    NotRegular(PathBuf),
    /// Too large.
    #[error("system instructions {0}: larger than {MAX_BYTES} bytes; shorten it")]
    TooLarge(PathBuf),
    /// Not UTF-8.
    #[error("system instructions {path}: not valid UTF-8 (first bad byte at offset {offset})")]
    NotUtf8 {
        /// The file as configured (`--system-instructions`), not canonicalised.
        path: PathBuf,
        /// Byte offset.
        offset: usize,
    },
    /// The file is empty or holds only whitespace: there would be nothing to prepend.
    #[error("system instructions {0}: the file is empty; write the instructions or point at another file")]
    Empty(PathBuf),
}

/// The loaded instructions (trimmed, non-empty, valid UTF-8, at most 64 KiB).
#[derive(Clone, Debug)]
pub struct SystemInstructions {
    text: Arc<str>,
    path: PathBuf,
}

impl SystemInstructions {
    /// Loads and checks the file.
    pub fn load(path: &Path) -> Result<Self, InstructionsError> {
        let read_error =
            |e: std::io::Error| InstructionsError::Read { path: path.to_path_buf(), reason: e.to_string() };
        let meta = std::fs::metadata(path).map_err(read_error)?;
        if !meta.is_file() {
            return Err(InstructionsError::NotRegular(path.to_path_buf()));
        }
        let mut bytes = Vec::new();
        // Read one byte past the limit so a file that grew after stat is still caught.
        std::fs::File::open(path).and_then(|f| f.take(MAX_BYTES + 1).read_to_end(&mut bytes)).map_err(read_error)?;
        if bytes.len() as u64 > MAX_BYTES {
            return Err(InstructionsError::TooLarge(path.to_path_buf()));
        }
        let text = String::from_utf8(bytes).map_err(|e| InstructionsError::NotUtf8 {
            path: path.to_path_buf(),
            offset: e.utf8_error().valid_up_to(),
        })?;
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(InstructionsError::Empty(path.to_path_buf()));
        }
        Ok(Self { text: Arc::from(trimmed), path: path.to_path_buf() })
    }

    /// The instructions shipped with Akritas (`instructions/SYSTEM.md` of the repository),
    /// built into the binary; their path reads `(built-in)`.
    pub fn built_in() -> Self {
        let text = include_str!("../../instructions/SYSTEM.md").trim();
        Self { text: Arc::from(text), path: PathBuf::from("(built-in)") }
    }

    /// The instruction text.
    pub fn text(&self) -> &str {
        &self.text
    }

    /// Where it was loaded from.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// SHA-256 of the text, for `/health` and audit.
    pub fn sha256(&self) -> String {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(self.text.as_bytes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(bytes: &[u8]) -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("SYSTEM.md");
        std::fs::write(&path, bytes).unwrap();
        (dir, path)
    }

    #[test]
    fn loads_trimmed_text() {
        let (_dir, path) = write(b"\n  Be careful.  \n");
        assert_eq!(SystemInstructions::load(&path).unwrap().text(), "Be careful.");
        let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("instructions/SYSTEM.md");
        assert_eq!(SystemInstructions::built_in().text(), SystemInstructions::load(&shipped).unwrap().text());
    }

    #[test]
    fn rejects_empty_large_non_utf8_directories_and_missing_files() {
        let (_d1, empty) = write(b" \n\t");
        assert!(matches!(SystemInstructions::load(&empty), Err(InstructionsError::Empty(_))));
        let (_d2, large) = write(&vec![b'a'; MAX_BYTES as usize + 1]);
        assert!(matches!(SystemInstructions::load(&large), Err(InstructionsError::TooLarge(_))));
        let (_d3, binary) = write(b"ok\xff");
        assert!(matches!(SystemInstructions::load(&binary), Err(InstructionsError::NotUtf8 { offset: 2, .. })));
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(SystemInstructions::load(dir.path()), Err(InstructionsError::NotRegular(_))));
        let missing = SystemInstructions::load(&dir.path().join("nope.md")).unwrap_err();
        assert!(missing.to_string().contains("--system-instructions"), "{missing}");
    }

    #[test]
    fn exactly_the_limit_is_accepted() {
        let (_dir, path) = write(&vec![b'a'; MAX_BYTES as usize]);
        assert!(SystemInstructions::load(&path).is_ok());
    }
}
