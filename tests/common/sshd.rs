//! Test harness: a throwaway OpenSSH `sshd` serving SFTP on a free 127.0.0.1 port, killed when
//! dropped. Everything it uses is its own, in a temporary directory: its configuration, an
//! ed25519 host key and client keys (ed25519 and RSA) made with `ssh-keygen`, `AuthorizedKeysFile`
//! holding those, its `PidFile`. It runs as the user the test runs as (as root in CI: its
//! configuration allows `PermitRootLogin prohibit-password`, so keys only), and the SFTP
//! subsystem is `internal-sftp`.
//!
//! The binary is `$SSHD`, `/usr/sbin/sshd` or `sshd` on the PATH. Without it [`SshServer::start`]
//! returns `None` and the calling test returns early (the skip is printed) — unless
//! `AAP_TEST_REQUIRE_SSHD=1` (set by `.ci/run`), where a missing server fails the test.

use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long the server may take to accept connections.
const BOOT_TIMEOUT: Duration = Duration::from_secs(10);

/// A running `sshd`, stopped (killed and reaped) on drop.
pub struct SshServer {
    pub port: u16,
    /// The user the server lets in (the test's own).
    pub user: String,
    /// The server's host key as a public key line (`ssh-ed25519 AAAA…`).
    pub host_key: String,
    /// The client's private key (OpenSSH PEM), which `AuthorizedKeysFile` lets in.
    pub client_key: String,
    /// An RSA client key, let in too.
    pub client_rsa_key: String,
    /// Another ed25519 key, which no configuration knows (a wrong pin, a key not let in).
    pub stranger_key: String,
    /// Its log (`-E`).
    pub log: PathBuf,
    child: Child,
    dir: tempfile::TempDir,
}

impl Drop for SshServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sshd_binary() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("SSHD") {
        return Some(PathBuf::from(path));
    }
    let standard = Path::new("/usr/sbin/sshd");
    if standard.is_file() {
        return Some(standard.to_owned());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join("sshd"))
        .find(|candidate| candidate.is_file())
}

fn keygen(path: &Path, kind: &str) -> String {
    let status = Command::new("ssh-keygen")
        .args(["-q", "-t", kind, "-N", "", "-C", "aap-test", "-f"])
        .arg(path)
        .stdout(Stdio::null())
        .status()
        .expect("ssh-keygen runs");
    assert!(status.success(), "ssh-keygen failed");
    std::fs::read_to_string(path).expect("key")
}

fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("free port")
}

impl SshServer {
    /// Starts a server on a free port, or `None` when there is no `sshd` (see the module doc).
    /// Panics if the binary exists but the server does not come up.
    pub fn start() -> Option<SshServer> {
        let Some(sshd) = sshd_binary() else {
            assert!(
                std::env::var_os("AAP_TEST_REQUIRE_SSHD").is_none_or(|v| v != "1"),
                "no sshd (install openssh-server) and AAP_TEST_REQUIRE_SSHD=1"
            );
            eprintln!("skipping this test: no sshd (install openssh-server to run it)");
            return None;
        };
        let dir = tempfile::tempdir().expect("temp dir");
        let file = |name: &str| dir.path().join(name);
        let _ = keygen(&file("host_key"), "ed25519");
        let host_key = std::fs::read_to_string(file("host_key.pub")).expect("host key");
        let client_key = keygen(&file("client_key"), "ed25519");
        let client_rsa_key = keygen(&file("client_rsa_key"), "rsa");
        let authorized = [file("client_key.pub"), file("client_rsa_key.pub")]
            .map(|f| std::fs::read_to_string(f).expect("public key"))
            .concat();
        std::fs::write(file("authorized_keys"), authorized).expect("authorized_keys");
        let stranger_key = keygen(&file("stranger_key"), "ed25519");
        let user = String::from_utf8(
            Command::new("id")
                .arg("-un")
                .output()
                .expect("id -un")
                .stdout,
        )
        .expect("user name")
        .trim()
        .to_owned();
        // sshd refuses to start without its privilege separation directory (made by the
        // service's unit, which tests do not run).
        let _ = std::fs::create_dir_all("/run/sshd");
        let log = file("sshd.log");
        for _attempt in 0..5 {
            let port = free_port();
            let config = file("sshd_config");
            std::fs::write(
                &config,
                format!(
                    "Port {port}\nListenAddress 127.0.0.1\nHostKey {host}\nPidFile {pid}\n\
                     AuthorizedKeysFile {keys}\nUsePAM no\nStrictModes no\n\
                     PermitRootLogin prohibit-password\nPubkeyAuthentication yes\n\
                     PasswordAuthentication yes\nKbdInteractiveAuthentication no\n\
                     Subsystem sftp internal-sftp\nLogLevel VERBOSE\n",
                    host = file("host_key").display(),
                    pid = file("sshd.pid").display(),
                    keys = file("authorized_keys").display(),
                ),
            )
            .expect("sshd_config");
            let mut child = Command::new(&sshd)
                .arg("-D")
                .arg("-f")
                .arg(&config)
                .arg("-E")
                .arg(&log)
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("sshd starts");
            let deadline = Instant::now() + BOOT_TIMEOUT;
            let address = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
            loop {
                if TcpStream::connect_timeout(&address, Duration::from_millis(200)).is_ok() {
                    return Some(SshServer {
                        port,
                        user,
                        host_key,
                        client_key,
                        client_rsa_key,
                        stranger_key,
                        log,
                        child,
                        dir,
                    });
                }
                let text = || std::fs::read_to_string(&log).unwrap_or_default();
                if let Some(status) = child.try_wait().expect("wait") {
                    let text = text();
                    assert!(
                        text.contains("Address already in use"),
                        "sshd exited ({status}):\n{text}"
                    );
                    break;
                }
                assert!(
                    Instant::now() < deadline,
                    "sshd did not listen within {BOOT_TIMEOUT:?}:\n{}",
                    text()
                );
                // (The test thread, while sshd boots; see the redis harness.)
                #[allow(clippy::disallowed_methods)]
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("five sshd starts in a row found their port taken");
    }

    /// A directory of the server's (its files are the test's to write): the base of the
    /// `sftp://` URL is its absolute path.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// The public half of `stranger_key` (`ssh-ed25519 AAAA…`).
    pub fn stranger_key_public(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stranger_key.pub")).expect("stranger key")
    }

    /// The server's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}
