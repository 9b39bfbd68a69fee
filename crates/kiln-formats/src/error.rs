use std::path::PathBuf;

/// Every error names the file it came from, so a user with many model files knows which one is bad.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {msg}")]
    Invalid { path: PathBuf, msg: String },
    /// Bytes that do not match the type and count they are decoded as (no file involved).
    #[error("{0}")]
    Dequant(String),
}

impl FormatError {
    pub fn invalid(path: impl Into<PathBuf>, msg: impl Into<String>) -> Self {
        FormatError::Invalid {
            path: path.into(),
            msg: msg.into(),
        }
    }
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        FormatError::Io {
            path: path.into(),
            source,
        }
    }
}

pub type Result<T, E = FormatError> = std::result::Result<T, E>;
