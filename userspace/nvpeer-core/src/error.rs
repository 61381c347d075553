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
    #[error("{path}: unexpected content {content:?}: expected {expected}")]
    Parse {
        path: PathBuf,
        content: String,
        expected: &'static str,
    },
    #[error("{path} resolves to {target}, outside the sysfs root {root}")]
    OutsideRoot {
        path: PathBuf,
        target: PathBuf,
        root: PathBuf,
    },
    /// A device whose files could not all be read (the errors as a device keeps them).
    #[error("{0}")]
    Device(String),
}

impl Error {
    /// A parse error for `content` of the file at `path`, which should have been `expected`.
    pub fn parse(
        path: impl Into<PathBuf>,
        content: impl Into<String>,
        expected: &'static str,
    ) -> Self {
        let mut content = content.into();
        // Keep messages one line and short even for binary garbage.
        if content.len() > 80 {
            let mut cut = 80;
            while !content.is_char_boundary(cut) {
                cut -= 1;
            }
            content.truncate(cut);
            content.push('…');
        }
        Self::Parse {
            path: path.into(),
            content,
            expected,
        }
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
