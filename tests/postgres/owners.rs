//! PostgreSQL: dlock uses only tables, functions and triggers of roles it trusts (its own, or one
//! named in the URL's `owner=`), and no operator or function another role adds to a schema of the
//! search path runs in its statements; through the real binary, with roles of each test's own.

use crate::postgres::{Pg, T};
use crate::postgres::server::PgServer;
use crate::support::*;

/// Drops `roles` and everything they own, if they exist.
fn drop_roles(server: &PgServer, roles: &[&str]) {
    for role in roles {
        server.psql(&format!(
            "DO $$ BEGIN IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{role}') THEN \
             EXECUTE 'DROP OWNED BY {role} CASCADE'; EXECUTE 'DROP ROLE {role}'; END IF; END $$"
        ));
    }
}

/// `postgres://ROLE:ROLE-pw@127.0.0.1:PORT/postgres?QUERY`
fn url_as(server: &PgServer, role: &str, query: &str) -> String {
    format!(
        "postgres://{role}:{role}-pw@127.0.0.1:{}/postgres?{query}",
        server.port()
    )
}

/// Another role, able to create in `public` (every role's right before PostgreSQL 15), made
/// dlock's tokens table its own before dlock ever ran, with a trigger that would make it a
/// superuser when run with dlock's rights (a superuser here). dlock refuses the table with 69,
/// naming it and its owner, before any statement touches it: the trigger never runs.
#[test]
fn a_tokens_table_made_by_another_role_is_refused_and_its_trigger_never_runs() {
    let server = PgServer::use_shared();
    drop_roles(&server, &["t_evil_mallory"]);
    server.psql(
        "DROP TABLE IF EXISTS t_evil_locks, t_evil_queue, t_evil_tokens, t_evil_runs, \
         t_evil_fired CASCADE; \
         CREATE ROLE t_evil_mallory; GRANT CREATE ON SCHEMA public TO t_evil_mallory; \
         CREATE TABLE t_evil_fired (n int); GRANT ALL ON t_evil_fired TO PUBLIC",
    );
    server.psql(
        "SET ROLE t_evil_mallory; \
         CREATE TABLE t_evil_tokens (name text PRIMARY KEY, last_token bigint NOT NULL); \
         CREATE FUNCTION t_evil_trap() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN \
           INSERT INTO public.t_evil_fired VALUES (1); ALTER ROLE t_evil_mallory SUPERUSER; \
           RETURN NULL; END $$; \
         CREATE TRIGGER t_evil_trap AFTER INSERT OR UPDATE OR DELETE ON t_evil_tokens \
           FOR EACH STATEMENT EXECUTE FUNCTION t_evil_trap()",
    );
    let pg = Pg::at(server.url_with("prefix=t_evil_"));
    drop(server);
    let ran = pg.dir.file("ran");
    let out = output(pg.dlock(&["run", "x", "--", "touch", ran.to_str().unwrap()]));
    let err = stderr(&out);
    let server = PgServer::use_shared();
    let fired = server.psql("SELECT count(*) FROM t_evil_fired");
    let made_super = server.psql("SELECT rolsuper FROM pg_roles WHERE rolname = 't_evil_mallory'");
    drop_roles(&server, &["t_evil_mallory"]);
    server.psql("DROP TABLE t_evil_fired");
    assert_eq!(fired, "0", "the trigger ran: {err}");
    assert_eq!(made_super, "f", "{err}");
    assert_eq!(code(&out), 69, "{err}");
    assert!(!ran.exists());
    assert!(
        err.contains("refusing table public.t_evil_tokens belongs to t_evil_mallory"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

/// The table of the last runs, added after the first three, is checked as they are: one another
/// role made before dlock is refused with 69, naming it and its owner, and nothing runs.
#[test]
fn a_runs_table_made_by_another_role_is_refused() {
    let server = PgServer::use_shared();
    drop_roles(&server, &["t_evr_mallory"]);
    server.psql(
        "CREATE ROLE t_evr_mallory; GRANT CREATE ON SCHEMA public TO t_evr_mallory; \
         SET ROLE t_evr_mallory; \
         CREATE TABLE t_evr_runs (name text PRIMARY KEY, last_run text, last_success text, \
           written_at timestamptz NOT NULL); \
         GRANT ALL ON t_evr_runs TO PUBLIC",
    );
    let pg = Pg::at(server.url_with("prefix=t_evr_"));
    drop(server);
    let ran = pg.dir.file("ran");
    let out = output(pg.dlock(&["run", "x", "--", "touch", ran.to_str().unwrap()]));
    let server = PgServer::use_shared();
    let written = server.psql("SELECT count(*) FROM t_evr_runs");
    drop_roles(&server, &["t_evr_mallory"]);
    server.psql("DROP TABLE IF EXISTS t_evr_locks, t_evr_queue, t_evr_tokens CASCADE");
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(!ran.exists());
    assert_eq!(written, "0");
    assert!(
        stderr(&out).contains("refusing table public.t_evr_runs belongs to t_evr_mallory"),
        "{}",
        stderr(&out)
    );
}

/// The README's recipe: an administrator role makes the tables (one run of dlock as it), grants
/// their use to two application roles, and each application names it in `owner=`: both share the
/// one set of tables (one holds, the other finds the lock busy, then gets it). Without `owner=`
/// an application refuses the administrator's tables (69). A trigger that a role with the
/// TRIGGER right (granted by the administrator) adds on a table is refused in turn, by its
/// function's owner.
#[test]
fn an_administrators_tables_serve_several_application_roles_that_name_it() {
    let server = PgServer::use_shared();
    let roles = ["t_adm_admin", "t_adm_app1", "t_adm_app2", "t_adm_other"];
    drop_roles(&server, &roles);
    for role in roles {
        server.psql(&format!("CREATE ROLE {role} LOGIN PASSWORD '{role}-pw'"));
    }
    server.psql("GRANT CREATE ON SCHEMA public TO t_adm_admin, t_adm_other");
    let admin = Pg::at(url_as(&server, "t_adm_admin", "prefix=t_adm_"));
    let app1 = Pg::at(url_as(
        &server,
        "t_adm_app1",
        "prefix=t_adm_&owner=t_adm_admin",
    ));
    let app2 = Pg::at(url_as(
        &server,
        "t_adm_app2",
        "prefix=t_adm_&owner=someone,t_adm_admin",
    ));
    let bare = Pg::at(url_as(&server, "t_adm_app1", "prefix=t_adm_"));
    drop(server);
    let made = output(admin.dlock(&["run", "x", "--", "true"]));
    assert_eq!(code(&made), 0, "{}", stderr(&made));
    PgServer::use_shared().psql(
        "GRANT SELECT, INSERT, UPDATE, DELETE ON t_adm_locks, t_adm_tokens, t_adm_queue, \
         t_adm_runs TO t_adm_app1, t_adm_app2; \
         GRANT USAGE ON SEQUENCE t_adm_queue_ticket_seq TO t_adm_app1, t_adm_app2",
    );

    let refused = output(bare.dlock(&["run", "x", "--", "true"]));
    assert_eq!(code(&refused), 69, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("t_adm_") && stderr(&refused).contains("belongs to t_adm_admin"),
        "{}",
        stderr(&refused)
    );

    let (mut held, _) = app1.holder(&["-n"], "x", "h1");
    let busy = output(app2.dlock(&["run", "-n", "x", "--", "true"]));
    assert_eq!(code(&busy), 75, "{}", stderr(&busy));
    app1.let_go("h1");
    assert!(wait_exit(&mut held, T).success());
    let (mut second, _) = app2.holder(&["-n"], "x", "h2");
    app2.let_go("h2");
    assert!(wait_exit(&mut second, T).success());
    assert!(app2.token("h2") > app1.token("h1"));

    // A role the administrator let add triggers, adding one with a function of its own.
    PgServer::use_shared().psql(
        "GRANT TRIGGER ON t_adm_locks TO t_adm_other; SET ROLE t_adm_other; \
         CREATE FUNCTION t_adm_spy() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NULL; \
         END $$; \
         CREATE TRIGGER t_adm_spy AFTER INSERT ON t_adm_locks \
           FOR EACH ROW EXECUTE FUNCTION t_adm_spy()",
    );
    let spied = output(app1.dlock(&["run", "x", "--", "true"]));
    let server = PgServer::use_shared();
    server.psql("DROP TABLE t_adm_locks, t_adm_tokens, t_adm_queue, t_adm_runs CASCADE");
    drop_roles(&server, &roles);
    assert_eq!(code(&spied), 69, "{}", stderr(&spied));
    assert!(
        stderr(&spied).contains("trigger t_adm_spy on public.t_adm_locks belongs to t_adm_other"),
        "{}",
        stderr(&spied)
    );
}

/// Another role that may create in `public` (in the search path of every session by default)
/// adds an operator `bigint * interval`, a closer match than the system's `float8 * interval`
/// for what dlock writes as `$ttl * interval '1 millisecond'`, and `text || bigint` (see below):
/// unpinned, dlock's statements and functions would call them with dlock's rights. Across a run that creates the tables, a holder
/// that renews, a waiter that takes its place in line (in the PL/pgSQL function) and is let in,
/// it never runs. On a server of its own: the operator would reach every other test's statements.
#[test]
fn an_operator_another_role_adds_to_public_never_runs_in_dlocks_statements() {
    let server = PgServer::start();
    server.psql(
        "CREATE ROLE t_op_mallory; GRANT CREATE ON SCHEMA public TO t_op_mallory; \
         CREATE TABLE t_op_fired (n int); GRANT ALL ON t_op_fired TO PUBLIC",
    );
    server.psql(
        "SET ROLE t_op_mallory; \
         CREATE FUNCTION public.t_op_times(bigint, interval) RETURNS interval LANGUAGE sql AS $$ \
           INSERT INTO public.t_op_fired VALUES (1); SELECT $2 * $1::float8 $$; \
         CREATE OPERATOR public.* (LEFTARG = bigint, RIGHTARG = interval, \
           FUNCTION = public.t_op_times); \
         CREATE FUNCTION public.t_op_cat(text, bigint) RETURNS text LANGUAGE sql AS $$ \
           INSERT INTO public.t_op_fired VALUES (2); SELECT $1 || $2::text $$; \
         CREATE OPERATOR public.|| (LEFTARG = text, RIGHTARG = bigint, \
           FUNCTION = public.t_op_cat)",
    );
    // The operators are live in an ordinary session (the second a closer match than the
    // system's `text || anynonarray` for a run record written as `'run1 ' || token`).
    assert_eq!(
        server.psql("SELECT 2::bigint * interval '1 second'"),
        "00:00:02"
    );
    assert_eq!(server.psql("SELECT 'run1 ' || 7::bigint"), "run1 7");
    server.psql("TRUNCATE t_op_fired");
    let pg = Pg::at(server.url_with("prefix=t_op_"));
    let (mut held, _) = pg.holder(&["--ttl", "1s"], "x", "h");
    let (mut waiter, _) = pg.start(&["--wait", "30s"], "x", "w");
    wait_until("the waiter in line", T, || {
        server.psql("SELECT count(*) FROM t_op_queue") == "1"
    });
    pg.let_go("h");
    assert!(wait_exit(&mut held, T).success());
    wait_for_file(&pg.dir.file("w.in"), T);
    pg.let_go("w");
    assert!(wait_exit(&mut waiter, T).success());
    assert_eq!(server.psql("SELECT count(*) FROM t_op_fired"), "0");
}

/// A function of dlock's name that another role owns: made by that role before dlock ran, then
/// replaced by dlock as a superuser (`CREATE OR REPLACE` keeps the owner), and replaced again by
/// its owner with a forged grant. A holder's run, which uses no function, goes on; the next
/// attempt on the busy lock, the first to call the function, is refused with 69 naming it and its
/// owner: never two holders.
#[test]
fn a_function_owned_by_another_role_is_refused_before_it_runs() {
    let server = PgServer::use_shared();
    drop_roles(&server, &["t_fn_mallory"]);
    server.psql("CREATE ROLE t_fn_mallory; GRANT CREATE ON SCHEMA public TO t_fn_mallory");
    let forge = |verb: &str| {
        let mut sql = String::from("SET ROLE t_fn_mallory;");
        for name in ["t_fn_acquire_v3", "t_fn_acquire_v4"] {
            sql.push_str(&format!(
                " {verb} FUNCTION {name}(p_name text, p_owner text, p_mode text, \
                 p_limit integer, p_ttl_ms bigint, p_pid bigint, p_host text, p_queue boolean, \
                 p_ticket bigint, p_message text, p_tail text) \
                 RETURNS TABLE (granted_token bigint, queue_ticket bigint, retry_ms bigint, \
                 run text) \
                 LANGUAGE sql AS $$ SELECT 42::bigint, NULL::bigint, NULL::bigint, NULL::text $$;"
            ));
        }
        sql
    };
    server.psql(&forge("CREATE"));
    let pg = Pg::at(server.url_with("prefix=t_fn_"));
    drop(server);
    let (mut held, _) = pg.holder(&[], "x", "h");
    PgServer::use_shared().psql(&forge("CREATE OR REPLACE"));
    let out = output(pg.dlock(&["run", "-n", "x", "--", "true"]));
    pg.let_go("h");
    let held_ok = wait_exit(&mut held, T).success();
    let server = PgServer::use_shared();
    server.psql("DROP TABLE t_fn_locks, t_fn_tokens, t_fn_queue, t_fn_runs CASCADE");
    drop_roles(&server, &["t_fn_mallory"]);
    drop(server);
    assert!(held_ok);
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("refusing function public.t_fn_acquire_v4 belongs to t_fn_mallory"),
        "{}",
        stderr(&out)
    );
}

/// What the other role of the two tests below makes: a schema named like the user (first in the
/// default search path, `"$user", public`), where all may create, with a view of dlock's locks table
/// (running with its caller's rights, so it shows the real rows, with a lease an hour longer) and
/// an `INSTEAD OF` trigger whose function, run with its caller's rights, writes who ran it and
/// pretends to have done the change; functions of dlock's names there, forging a grant; and
/// operators in `public` for every type dlock compares and joins. Everything of it writes who ran
/// it into `public.t_sq_fired`.
fn squat(schema: &str, prefix: &str) -> String {
    let spy = "INSERT INTO public.t_sq_fired VALUES (current_user, $w$WHAT$w$)";
    let op = |name: &str, sym: &str, left: &str, right: &str, returns: &str, body: &str| {
        format!(
            "CREATE FUNCTION public.t_sq_{name}({left}, {right}) RETURNS {returns} \
             LANGUAGE sql AS $f$ {}; SELECT {body} $f$; \
             CREATE OPERATOR public.{sym} (LEFTARG = {left}, RIGHTARG = {right}, \
             FUNCTION = public.t_sq_{name});",
            spy.replace("WHAT", &format!("operator {sym}"))
        )
    };
    let forged = |function: &str, args: &str, returns: &str, body: &str| {
        format!(
            "CREATE FUNCTION {schema}.{prefix}{function}({args}) RETURNS {returns} \
             LANGUAGE sql AS $f$ {}; SELECT {body} $f$;",
            spy.replace("WHAT", function)
        )
    };
    format!(
        "SET ROLE t_sq_mallory; \
         CREATE SCHEMA {schema}; GRANT USAGE, CREATE ON SCHEMA {schema} TO PUBLIC; \
         CREATE FUNCTION {schema}.spy() RETURNS trigger LANGUAGE plpgsql AS $f$ BEGIN \
           {}; IF TG_OP = 'DELETE' THEN RETURN OLD; END IF; RETURN NEW; END $f$; \
         CREATE VIEW {schema}.{prefix}locks WITH (security_invoker = true) AS \
           SELECT name, owner, mode, token, since, expires_at + interval '1 hour' AS expires_at, \
                  pid, host, message, kept_until, kept_note FROM public.{prefix}locks; \
         CREATE TRIGGER spy INSTEAD OF INSERT OR UPDATE OR DELETE ON {schema}.{prefix}locks \
           FOR EACH ROW EXECUTE FUNCTION {schema}.spy(); \
         GRANT ALL ON {schema}.{prefix}locks TO PUBLIC; \
         {} {} {} {} {} {}",
        spy.replace("WHAT", "trigger"),
        forged(
            "acquire_v4",
            "p_name text, p_owner text, p_mode text, p_limit integer, p_ttl_ms bigint, \
             p_pid bigint, p_host text, p_queue boolean, p_ticket bigint, p_message text, \
             p_tail text",
            "TABLE (granted_token bigint, queue_ticket bigint, retry_ms bigint, run text)",
            "42::bigint, NULL::bigint, NULL::bigint, NULL::text",
        ),
        forged(
            "release_v3",
            "text, text, text, text, text, boolean",
            "boolean",
            "true",
        ),
        op(
            "eq",
            "=",
            "text",
            "text",
            "boolean",
            "$1 OPERATOR(pg_catalog.=) $2"
        ),
        op(
            "gt",
            ">",
            "timestamptz",
            "timestamptz",
            "boolean",
            "$1 OPERATOR(pg_catalog.>) $2"
        ),
        op(
            "plus",
            "+",
            "timestamptz",
            "interval",
            "timestamptz",
            "$1 OPERATOR(pg_catalog.+) $2"
        ),
        op(
            "cat",
            "||",
            "text",
            "text",
            "text",
            "$1 OPERATOR(pg_catalog.||) $2"
        ),
    )
}

/// Roles `t_sq_alice` (who runs dlock, able to create in `public`) and `t_sq_mallory` (able
/// to create schemas in the database and objects in `public`, nothing more), and the table their
/// objects write to, on `server`.
fn alice_and_mallory(server: &PgServer) {
    server.psql(
        "CREATE ROLE t_sq_alice LOGIN PASSWORD 't_sq_alice-pw'; \
         CREATE ROLE t_sq_mallory; \
         GRANT CREATE ON SCHEMA public TO t_sq_alice, t_sq_mallory; \
         GRANT CREATE ON DATABASE postgres TO t_sq_mallory; \
         CREATE TABLE public.t_sq_fired (who text, what text); \
         GRANT ALL ON public.t_sq_fired TO PUBLIC",
    );
}

/// The schema named like the user, with its view, trigger and forged functions, and operators in
/// `public`, all made by another role while alice's dlock holds a lock (ttl 2s, renewing) and
/// another of hers waits: the holder goes on renewing its real row (over two ttls past, the waiter
/// still waiting), the waiter gets in only once the holder lets go, with a later token, and none
/// of the other role's code ever ran. A new run of alice's meanwhile refuses the schema, naming
/// its owner (69). On a server of its own: the operators would reach every other test.
#[test]
fn objects_another_role_makes_while_dlock_holds_are_never_reached() {
    let server = PgServer::start();
    alice_and_mallory(&server);
    let pg = Pg::at(url_as(&server, "t_sq_alice", "prefix=rt_"));
    let (mut held, held_err) = pg.holder(&["--ttl", "2s"], "x", "h");
    let (mut waiter, _) = pg.start(&["--wait", "60s"], "x", "w");
    wait_until("the waiter in line", T, || {
        server.psql("SELECT count(*) FROM public.rt_queue") == "1"
    });
    server.psql(&squat("t_sq_alice", "rt_"));
    let made = server.psql("SELECT clock_timestamp()");
    wait_until(
        "over two ttls of renewals after the objects were made",
        T,
        || {
            assert!(!pg.runs("w"), "a second holder: {}", held_err.text());
            server.psql(&format!(
                "SELECT coalesce((SELECT max(expires_at) FROM public.rt_locks) \
             > '{made}'::timestamptz + interval '6.5 seconds', false)"
            )) == "t"
        },
    );
    let refused = output(pg.dlock(&["run", "-n", "y", "--", "true"]));
    pg.let_go("h");
    assert!(wait_exit(&mut held, T).success(), "{}", held_err.text());
    wait_for_file(&pg.dir.file("w.in"), T);
    pg.let_go("w");
    assert!(wait_exit(&mut waiter, T).success());
    assert!(pg.token("w") > pg.token("h"));
    assert_eq!(server.psql("SELECT count(*) FROM public.t_sq_fired"), "0");
    assert_eq!(code(&refused), 69, "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains(
            "refusing schema t_sq_alice belongs to t_sq_mallory: not the connecting role"
        ),
        "{}",
        stderr(&refused)
    );
}

/// A schema named like the user, made by another role before dlock ever ran: refused with 69,
/// naming it and its owner, before anything is made in it or run; the other role's objects
/// (there and in `public`) never run. On a server of its own, as above.
#[test]
fn a_schema_named_like_the_user_made_by_another_role_is_refused_before_the_first_run() {
    let server = PgServer::start();
    alice_and_mallory(&server);
    // The view reads a table of dlock's in public: one made by alice, which never ran dlock.
    server.psql(
        "SET ROLE t_sq_alice; \
         CREATE TABLE public.rt_locks (name text, owner text, mode text, token bigint, \
           since timestamptz, expires_at timestamptz, pid bigint, host text, message text, \
           kept_until timestamptz, kept_note text)",
    );
    server.psql(&squat("t_sq_alice", "rt_"));
    let pg = Pg::at(url_as(&server, "t_sq_alice", "prefix=rt_"));
    let ran = pg.dir.file("ran");
    let out = output(pg.dlock(&["run", "x", "--", "touch", ran.to_str().unwrap()]));
    assert_eq!(code(&out), 69, "{}", stderr(&out));
    assert!(!ran.exists());
    assert!(
        stderr(&out).contains("refusing schema t_sq_alice belongs to t_sq_mallory"),
        "{}",
        stderr(&out)
    );
    assert_eq!(stderr(&out).trim().lines().count(), 1, "{}", stderr(&out));
    assert_eq!(server.psql("SELECT count(*) FROM public.t_sq_fired"), "0");
    assert_eq!(
        server.psql(
            "SELECT count(*) FROM pg_class WHERE relnamespace = 't_sq_alice'::regnamespace \
             AND relname LIKE 'rt\\_%' AND relkind = 'r'"
        ),
        "0"
    );
}
