//! Debian's PgBouncer in front of a test's PostgreSQL server, on a free loopback port, in the pool
//! mode the test asks for (SCRAM with the superuser's password, as the server has it). Runs as
//! `nobody` when we are root (PgBouncer refuses root); stopped when dropped.

use std::process::{Child, Stdio};
use std::time::Duration;

use super::server::{as_server_user, give_to_server_user, PgServer, PASSWORD};
use crate::support::{on_a_free_port, until_listening};

pub struct PgBouncer {
    port: u16,
    child: Child,
    _dir: tempfile::TempDir,
}

impl PgBouncer {
    /// PgBouncer for `server`'s database `postgres`, in `pool_mode` (`transaction`, `session`).
    pub fn start(server: &PgServer, pool_mode: &str) -> PgBouncer {
        on_a_free_port("pgbouncer", |port| {
            PgBouncer::start_on(port, server, pool_mode)
        })
    }

    /// `None` when it exited before it listened on `port`.
    fn start_on(port: u16, server: &PgServer, pool_mode: &str) -> Option<PgBouncer> {
        let dir = tempfile::tempdir().expect("pgbouncer dir");
        let users = dir.path().join("users.txt");
        std::fs::write(&users, format!("\"postgres\" \"{PASSWORD}\"\n")).unwrap();
        let ini = dir.path().join("pgbouncer.ini");
        std::fs::write(
            &ini,
            format!(
                "[databases]\npostgres = host=127.0.0.1 port={} dbname=postgres\n\
                 [pgbouncer]\nlisten_addr = 127.0.0.1\nlisten_port = {port}\n\
                 unix_socket_dir =\nauth_type = scram-sha-256\nauth_file = {}\n\
                 pool_mode = {pool_mode}\ndefault_pool_size = 4\nmax_client_conn = 200\n",
                server.port(),
                users.display()
            ),
        )
        .unwrap();
        give_to_server_user(dir.path());
        let child = as_server_user("/usr/sbin/pgbouncer")
            .arg(&ini)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("pgbouncer is installed (Debian package pgbouncer; scripts/test installs it)");
        crate::support::reaper::end_with_this_process(&child, dir.path());
        let mut pooler = PgBouncer {
            port,
            child,
            _dir: dir,
        };
        let within = Duration::from_secs(30);
        until_listening("pgbouncer to listen", &mut pooler.child, port, within).then_some(pooler)
    }

    /// `postgres://postgres:PASSWORD@127.0.0.1:PORT/postgres?QUERY` through the pooler.
    pub fn url_with(&self, query: &str) -> String {
        format!(
            "postgres://postgres:{PASSWORD}@127.0.0.1:{}/postgres?{query}",
            self.port
        )
    }
}

impl Drop for PgBouncer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
