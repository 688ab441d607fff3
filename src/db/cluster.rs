//! A private PostgreSQL cluster in a folder of its own, from the machine's PostgreSQL binaries: what
//! `demo` (and the tests, when `DATABASE_URL` is unset) run on. PostgreSQL refuses to run as root, so
//! as root the cluster belongs to the `postgres` user (else `nobody`); as anyone else, to them.

use std::fs;
use std::io::Write;
use std::net::TcpListener;
use std::os::unix::fs::{PermissionsExt, chown};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use nix::unistd::{Uid, User};

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "PostgreSQL's server programs (initdb, pg_ctl) were not found on PATH nor in /usr/lib/postgresql/*/bin. \
         Install them (Debian/Ubuntu: `sudo apt-get install postgresql`; Fedora: `sudo dnf install postgresql-server`; \
         macOS: `brew install postgresql`), or set DATABASE_URL to an existing database."
    )]
    NoBinaries,
    #[error("{step} failed: {detail}")]
    Command { step: String, detail: String },
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error(
        "no unprivileged user to run PostgreSQL as: it refuses to run as root and neither `postgres` nor `nobody` exists"
    )]
    NoUser,
}

fn io(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ClusterError {
    let path = path.to_owned();
    move |source| ClusterError::Io { what, path, source }
}

/// Where `initdb` and `pg_ctl` are.
#[derive(Debug, Clone)]
pub struct Binaries {
    pub dir: PathBuf,
}

impl Binaries {
    /// PATH first, then the newest `/usr/lib/postgresql/<version>/bin`.
    pub fn find() -> Result<Binaries, ClusterError> {
        Self::find_in(
            std::env::var_os("PATH").as_deref(),
            Path::new("/usr/lib/postgresql"),
        )
    }

    fn find_in(path: Option<&std::ffi::OsStr>, lib: &Path) -> Result<Binaries, ClusterError> {
        let has_both = |d: &Path| d.join("initdb").is_file() && d.join("pg_ctl").is_file();
        if let Some(path) = path {
            for d in std::env::split_paths(path) {
                if has_both(&d) {
                    return Ok(Binaries { dir: d });
                }
            }
        }
        let mut versions: Vec<(u32, PathBuf)> = fs::read_dir(lib)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| {
                let v = e.file_name().to_str()?.parse::<u32>().ok()?;
                let bin = e.path().join("bin");
                has_both(&bin).then_some((v, bin))
            })
            .collect();
        versions.sort();
        versions
            .pop()
            .map(|(_, dir)| Binaries { dir })
            .ok_or(ClusterError::NoBinaries)
    }

    fn tool(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

/// A started private cluster.
#[derive(Debug)]
pub struct PrivateCluster {
    root: PathBuf,
    binaries: Binaries,
    owner: Option<User>,
    pub port: u16,
    password: String,
}

impl PrivateCluster {
    /// The default folder: `$XDG_DATA_HOME/slicemeter/<name>` (or `~/.local/share/...`); as root,
    /// `/var/lib/slicemeter/<name>`, which the unprivileged owner can reach.
    pub fn default_root(name: &str) -> PathBuf {
        if Uid::effective().is_root() {
            return PathBuf::from("/var/lib/slicemeter").join(name);
        }
        let base = std::env::var_os("XDG_DATA_HOME")
            .map(PathBuf::from)
            .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
            .unwrap_or_else(std::env::temp_dir);
        base.join("slicemeter").join(name)
    }

    fn data(&self) -> PathBuf {
        self.root.join("data")
    }

    /// Creates the cluster in `root` if it is not there, and starts it unless it is running.
    pub fn start(root: &Path) -> Result<PrivateCluster, ClusterError> {
        let binaries = Binaries::find()?;
        let owner = if Uid::effective().is_root() {
            Some(
                User::from_name("postgres")
                    .ok()
                    .flatten()
                    .or_else(|| User::from_name("nobody").ok().flatten())
                    .ok_or(ClusterError::NoUser)?,
            )
        } else {
            None
        };
        fs::create_dir_all(root).map_err(io("creating", root))?;
        if owner.is_some() {
            // The owner must be able to reach its folders through this one.
            fs::set_permissions(root, fs::Permissions::from_mode(0o755))
                .map_err(io("opening", root))?;
        }
        let root = root.canonicalize().map_err(io("resolving", root))?;
        let password_file = root.join("password");
        let mut cluster = PrivateCluster {
            binaries,
            owner,
            port: 0,
            password: String::new(),
            root,
        };
        if !cluster.data().join("PG_VERSION").exists() {
            cluster.init(&password_file)?;
        }
        cluster.password = fs::read_to_string(&password_file)
            .map_err(io("reading", &password_file))?
            .trim()
            .to_owned();
        match cluster.running_port() {
            Some(port) => cluster.port = port,
            None => cluster.launch()?,
        }
        Ok(cluster)
    }

    fn init(&self, password_file: &Path) -> Result<(), ClusterError> {
        let data = self.data();
        let run = self.root.join("run");
        for d in [&data, &run] {
            fs::create_dir_all(d).map_err(io("creating", d))?;
            self.give(d)?;
        }
        fs::set_permissions(&data, fs::Permissions::from_mode(0o700))
            .map_err(io("locking", &data))?;
        let password: String = {
            use rand::Rng;
            rand::rng()
                .sample_iter(rand::distr::Alphanumeric)
                .take(32)
                .map(char::from)
                .collect()
        };
        // initdb reads the password from a file its user can read; it is removed right after.
        let pwfile = run.join("initdb-password");
        write_private(&pwfile, &password)?;
        self.give(&pwfile)?;
        let out = self.run(
            Command::new(self.binaries.tool("initdb"))
                .arg("-D")
                .arg(&data)
                .args([
                    "-U",
                    "postgres",
                    "--auth=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--no-instructions",
                ])
                .arg(format!("--pwfile={}", pwfile.display())),
        );
        let _ = fs::remove_file(&pwfile);
        check("initdb", out)?;
        write_private(password_file, &password)
    }

    /// The port of the postmaster already running on this folder, if any.
    fn running_port(&self) -> Option<u16> {
        let status = self.run(
            Command::new(self.binaries.tool("pg_ctl"))
                .arg("status")
                .arg("-D")
                .arg(self.data()),
        );
        if !status.as_ref().is_ok_and(|o| o.status.success()) {
            return None;
        }
        // postmaster.pid: line 4 is the port.
        fs::read_to_string(self.data().join("postmaster.pid"))
            .ok()?
            .lines()
            .nth(3)?
            .trim()
            .parse()
            .ok()
    }

    fn launch(&mut self) -> Result<(), ClusterError> {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map_err(io("finding a free port on", Path::new("127.0.0.1")))?
            .port();
        self.launch_on(port)
    }

    /// Starts a stopped cluster again on the port it had, so its clients' URLs still reach it: with
    /// [`PrivateCluster::stop`], what a database restart looks like to them.
    pub fn start_again(&mut self) -> Result<(), ClusterError> {
        self.launch_on(self.port)
    }

    fn launch_on(&mut self, port: u16) -> Result<(), ClusterError> {
        let log = self.root.join("run").join("postgres.log");
        let options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=on",
            self.root.join("run").display()
        );
        let out = self.run(
            Command::new(self.binaries.tool("pg_ctl"))
                .arg("start")
                .arg("-D")
                .arg(self.data())
                .arg("-l")
                .arg(&log)
                .args(["-w", "-t", "60", "-o", &options]),
        );
        check("pg_ctl start", out).map_err(|e| match e {
            ClusterError::Command { step, detail } => ClusterError::Command {
                step,
                detail: format!("{detail}\n{}", fs::read_to_string(&log).unwrap_or_default()),
            },
            other => other,
        })?;
        self.port = port;
        Ok(())
    }

    /// A connection URL for database `db`. The password is in it: never log this.
    pub fn url(&self, db: &str) -> String {
        format!(
            "postgres://postgres:{}@127.0.0.1:{}/{db}",
            self.password, self.port
        )
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Stops the cluster (fast shutdown: sessions are ended, data is safe).
    pub fn stop(&self) -> Result<(), ClusterError> {
        check(
            "pg_ctl stop",
            self.run(
                Command::new(self.binaries.tool("pg_ctl"))
                    .arg("stop")
                    .arg("-D")
                    .arg(self.data())
                    .args(["-m", "fast", "-w"]),
            ),
        )
    }

    fn give(&self, path: &Path) -> Result<(), ClusterError> {
        if let Some(u) = &self.owner {
            chown(path, Some(u.uid.as_raw()), Some(u.gid.as_raw()))
                .map_err(io("handing over", path))?;
        }
        Ok(())
    }

    fn run(&self, cmd: &mut Command) -> std::io::Result<Output> {
        cmd.current_dir(&self.root)
            .env("LC_ALL", "C")
            .env_remove("PGDATA");
        if let Some(u) = &self.owner {
            cmd.uid(u.uid.as_raw())
                .gid(u.gid.as_raw())
                .env("HOME", &self.root);
        }
        cmd.output()
    }
}

fn write_private(path: &Path, text: &str) -> Result<(), ClusterError> {
    let mut f = fs::OpenOptions::new()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .map_err(io("writing", path))?;
    f.write_all(text.as_bytes()).map_err(io("writing", path))
}

use std::os::unix::fs::OpenOptionsExt;

fn check(step: &str, out: std::io::Result<Output>) -> Result<(), ClusterError> {
    let out = out.map_err(|e| ClusterError::Command {
        step: step.to_owned(),
        detail: e.to_string(),
    })?;
    if out.status.success() {
        Ok(())
    } else {
        Err(ClusterError::Command {
            step: step.to_owned(),
            detail: format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        })
    }
}

/// Creates database `db` on the server at `admin_url` (a URL to an existing database) if missing.
pub async fn ensure_database(admin_url: &str, db: &str) -> Result<(), sqlx::Error> {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(admin_url).await?;
    let exists: bool =
        sqlx::query_scalar("select exists(select 1 from pg_database where datname = $1)")
            .bind(db)
            .fetch_one(&mut conn)
            .await?;
    if !exists {
        // Identifiers cannot be bound; `db` is quoted as an identifier.
        sqlx::query(&format!("create database \"{}\"", db.replace('"', "\"\"")))
            .execute(&mut conn)
            .await?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_postgresql_binaries_the_error_says_what_to_install() {
        let empty = tempfile::tempdir().unwrap();
        let err = Binaries::find_in(Some(empty.path().as_os_str()), empty.path()).unwrap_err();
        let message = err.to_string();
        assert!(
            message.contains("sudo apt-get install postgresql"),
            "{message}"
        );
        assert!(message.contains("or set DATABASE_URL"), "{message}");
    }

    #[test]
    fn the_newest_installed_version_is_preferred() {
        let lib = tempfile::tempdir().unwrap();
        for v in ["13", "15", "9"] {
            let bin = lib.path().join(v).join("bin");
            fs::create_dir_all(&bin).unwrap();
            for tool in ["initdb", "pg_ctl"] {
                fs::write(bin.join(tool), "").unwrap();
            }
        }
        let found = Binaries::find_in(None, lib.path()).unwrap();
        assert_eq!(found.dir, lib.path().join("15/bin"));
    }
}
