//! PostgreSQL's credentials and rights: a password never shows in a message, a URL whose password
//! has an unencoded `@` is refused naming no secret, and a role without the rights to make
//! dlock's tables is told the grant to ask for.

use super::*;

#[test]
fn passwords_never_show_in_messages() {
    let server = PgServer::use_shared();
    let port = server.port();
    drop(server);
    let wrong = format!("postgres://postgres:wrong-SECRET@127.0.0.1:{port}/postgres");
    let (_held, refused) = refusing_port();
    let nobody = format!("postgres://postgres:{PASSWORD}@127.0.0.1:{refused}/postgres");
    for url in [&wrong, &nobody] {
        let mut cmd = dlock();
        cmd.args([
            "--backend",
            "postgres",
            "--url",
            url,
            "run",
            "p",
            "--",
            "true",
        ]);
        let out = output(cmd);
        assert_eq!(code(&out), 69, "{}", stderr(&out));
        let err = stderr(&out);
        assert!(!err.contains("SECRET") && !err.contains(PASSWORD), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
    }
}

#[test]
fn a_user_without_ddl_rights_is_told_the_grant_to_ask_for() {
    let server = PgServer::use_shared();
    server.psql("DROP ROLE IF EXISTS lowly; CREATE ROLE lowly LOGIN PASSWORD 'low-SECRET'");
    let url = format!(
        "postgres://lowly:low-SECRET@127.0.0.1:{}/postgres?prefix=t_ddl_",
        server.port()
    );
    drop(server);
    let mut cmd = dlock();
    cmd.args([
        "--backend",
        "postgres",
        "--url",
        &url,
        "run",
        "d",
        "--",
        "true",
    ]);
    let out = output(cmd);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("GRANT CREATE ON SCHEMA public TO lowly"),
        "{err}"
    );
    assert!(!err.contains("SECRET"), "{err}");
}

#[test]
fn a_url_with_an_unencoded_at_sign_in_its_password_is_refused_naming_no_secret() {
    let (_refusing, port) = refusing_port();
    let url = format!("postgres://dlock:S3cr3t@x@127.0.0.1:{port}/dlock");
    let out = output({
        let mut cmd = dlock();
        cmd.args(["--backend", "postgres", "--url", &url, "status", "x"]);
        cmd
    });
    let said = stderr(&out);
    assert_eq!(code(&out), 64, "{said}");
    assert!(said.contains("%40"), "says how to write it: {said}");
    assert!(!said.contains("S3cr3t"), "{said}");
    assert_eq!(said.lines().count(), 1, "{said}");
}
