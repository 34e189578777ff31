//! Files the gateway writes into its state directory: whole or not at all; the directory
//! itself private to the gateway's user; secrets kept there.

use std::io::Write;
use std::path::Path;

/// Write `parts` to `path` through a temporary file and a rename, so a reader (or a restart
/// after a crash) never sees half a file. Creates the parent directory.
pub fn write_atomically(path: &Path, parts: &[&[u8]]) -> std::io::Result<()> {
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
pub fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut builder, 0o700);
    builder.create(dir)
}

/// Make `dir` the gateway's private state directory: created (mode 0700) when missing;
/// when found, refused if group- or world-writable (someone else could plant files the
/// gateway trusts) and otherwise narrowed to 0700 (it holds message payloads and keys).
pub fn private_state_dir(dir: &Path) -> std::io::Result<()> {
    if !dir.exists() {
        return create_private_dir(dir);
    }
    let meta = std::fs::metadata(dir)?;
    if !meta.is_dir() {
        return Err(std::io::Error::other(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt as _;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o022 != 0 {
            return Err(std::io::Error::other(format!(
                "the state directory {} is writable by its group or by everyone (mode {mode:o}); \
                 make it private to the gateway's user (chmod 700) and check what is in it",
                dir.display()
            )));
        }
        if mode != 0o700 {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    Ok(())
}

/// Fill `buf` from the system's random source (`/dev/urandom`): session ids, tokens, keys.
pub fn random_bytes(buf: &mut [u8]) -> std::io::Result<()> {
    use std::io::Read as _;
    std::fs::File::open("/dev/urandom")?.read_exact(buf)
}

/// The secret kept at `path`: 32 random bytes, created (mode 0600) when missing. Two
/// processes creating it at once agree on the first one written.
pub fn secret(path: &Path) -> std::io::Result<Vec<u8>> {
    if !path.exists() {
        if let Some(dir) = path.parent() {
            create_private_dir(dir)?;
        }
        let mut key = [0_u8; 32];
        random_bytes(&mut key)?;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
        match options.open(path) {
            Ok(mut file) => {
                file.write_all(&key)?;
                file.sync_all()?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
    }
    let key = std::fs::read(path)?;
    if key.len() < 16 {
        return Err(std::io::Error::other(format!(
            "{} holds {} bytes; a key needs at least 16",
            path.display(),
            key.len()
        )));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt as _;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn the_state_directory_is_private_whether_created_or_found() {
        let root = std::env::temp_dir().join(format!("verdict-state-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        let made = root.join("made");
        private_state_dir(&made).unwrap();
        assert_eq!(mode(&made), 0o700);
        let found = root.join("found");
        std::fs::create_dir_all(&found).unwrap();
        std::fs::set_permissions(&found, std::fs::Permissions::from_mode(0o755)).unwrap();
        private_state_dir(&found).unwrap();
        assert_eq!(mode(&found), 0o700, "a readable directory is narrowed");
        let open = root.join("open");
        std::fs::create_dir_all(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        let err = private_state_dir(&open).unwrap_err().to_string();
        assert!(
            err.contains(open.to_str().unwrap()) && err.contains("777"),
            "{err}"
        );
        assert_eq!(mode(&open), 0o777, "refused, not silently changed");
        let key = secret(&root.join("made/k.key")).unwrap();
        assert_eq!(key.len(), 32);
        assert_eq!(mode(&root.join("made/k.key")), 0o600);
        assert_eq!(secret(&root.join("made/k.key")).unwrap(), key, "kept");
        let _ = std::fs::remove_dir_all(root);
    }
}
