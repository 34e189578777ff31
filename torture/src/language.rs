//! The language a run's `rules` policy is written in: the same table in Rust, Python or
//! JavaScript, each built from its own project in this workspace.

/// One of the `rules` policy's ports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Language {
    /// `policies/rules`.
    #[default]
    Rust,
    /// `policies/rules-py`.
    Python,
    /// `policies/rules-js`.
    Javascript,
}

impl Language {
    /// The project `verdict build` builds, relative to the workspace.
    pub fn project(self) -> &'static str {
        match self {
            Language::Rust => "policies/rules",
            Language::Python => "policies/rules-py",
            Language::Javascript => "policies/rules-js",
        }
    }

    /// As `--languages` takes it.
    pub fn name(self) -> &'static str {
        match self {
            Language::Rust => "rust",
            Language::Python => "python",
            Language::Javascript => "javascript",
        }
    }

    /// For the table's narrow column.
    pub fn short(self) -> &'static str {
        match self {
            Language::Rust => "rs",
            Language::Python => "py",
            Language::Javascript => "js",
        }
    }

    /// Whether a gateway's first start compiles an interpreter (tens of megabytes of Wasm:
    /// 15-20 s on two busy cores) before it is ready; later starts load the compiled
    /// artifact from the gateway's cache.
    pub fn compiles_slowly(self) -> bool {
        self != Language::Rust
    }
}
