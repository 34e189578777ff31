//! Files the gateway writes into its state directory: whole or not at all.

use std::io::Write;
use std::path::Path;

/// Write `parts` to `path` through a temporary file and a rename, so a reader (or a restart
/// after a crash) never sees half a file. Creates the parent directory.
pub(crate) fn write_atomically(path: &Path, parts: &[&[u8]]) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let mut file = std::fs::File::create(&tmp)?;
    for part in parts {
        file.write_all(part)?;
    }
    file.sync_all()?;
    std::fs::rename(&tmp, path)
}

/// Create `dir` (and its parents) readable only by this user.
pub(crate) fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}
