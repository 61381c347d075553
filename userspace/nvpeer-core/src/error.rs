use std::path::PathBuf;

/// Errors of the library; each says which file or value was at fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: unexpected content {content:?}: {expected}")]
    Parse {
        path: PathBuf,
        content: String,
        expected: &'static str,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
