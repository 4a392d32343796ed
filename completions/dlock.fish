# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_dlock_global_optspecs
    string join \n b/backend= u/url= password-file= connect-timeout= replicas= v/verbose q/quiet h/help V/version
end

function __fish_dlock_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_dlock_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_dlock_using_subcommand
    set -l cmd (__fish_dlock_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c dlock -n "__fish_dlock_needs_command" -s b -l backend -d 'Where locks live: lock files on this machine, Redis, ZooKeeper, etcd, PostgreSQL or MySQL' -r -f -a "file\t'Lock files in a local directory (flock(2)); no server, one machine'
redis\t'A Redis server (or several, with Redlock); cluster-wide'
zk\t'A ZooKeeper ensemble; cluster-wide'
etcd\t'An etcd cluster; cluster-wide'
postgres\t'A PostgreSQL database (tables of dlock\'s own); cluster-wide'
mysql\t'A MySQL or MariaDB database (tables of dlock\'s own); cluster-wide'"
complete -c dlock -n "__fish_dlock_needs_command" -s u -l url -d 'The backend\'s address: a directory (or file:///dir) for file, redis://[user:password@]host:port[/db] (give it 3, 5, ... times for Redlock) or redis+sentinel://[user:password@]host:port,host:port/MASTER[/db][?sentinel_password=P] or redis+cluster://[user:password@]host:port,host:port (rediss+cluster:// for TLS), zk://[user:password@]host:port,host:port[/chroot], etcd://[user:password@]host:port,host:port (etcds:// for TLS), postgres://..., mysql://... DLOCK_URL and the configuration file\'s url may list several, separated by commas or spaces' -r
complete -c dlock -n "__fish_dlock_needs_command" -l password-file -d 'Read the servers\' password from the first line of this file, for every URL that has none (after its user name, if it has one), so that no password is on a command line. The file must be yours or root\'s, and neither writable by others nor readable by every user' -r -F
complete -c dlock -n "__fish_dlock_needs_command" -l connect-timeout -d 'How long to try to reach a server before giving up with exit status 69 (at least 100ms)' -r -f
complete -c dlock -n "__fish_dlock_needs_command" -l replicas -d 'Redis: wait until N replicas of the master acknowledged each acquisition and renewal (WAIT) before the command starts or the lease counts as renewed, so a failover keeps the lock' -r -f
complete -c dlock -n "__fish_dlock_needs_command" -s v -l verbose -d 'Print timestamped events on stderr: waiting and for whom, acquired, renewed, lost, exited'
complete -c dlock -n "__fish_dlock_needs_command" -s q -l quiet -d 'Print nothing but errors'
complete -c dlock -n "__fish_dlock_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_needs_command" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "run" -d 'Acquire the lock, run COMMAND while holding it, release it when COMMAND exits'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "status" -d 'Show who holds a lock. Exit status 0 when held, 1 when free'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "list" -d 'List every lock currently held'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "hold" -d 'Hold the lock for the rest of the calling shell script: return once it is held, leaving a keeper that renews it until the script\'s shell exits or runs `dlock release NAME`'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "release" -d 'Give up early what this shell took with `dlock hold`; with --force, break a lock for whoever holds it (for an operator cleaning up after a dead holder)'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "generate" -d 'Write the man pages (DIR/man) and the bash, zsh and fish completions (DIR/completions) of this dlock, for the backends it was built with'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s l -l limit -d 'Take one of N seats: at most N holders with --limit at once (a semaphore)' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -s w -l wait -d 'Give up after waiting this long: seconds (120, 0.5; 0 is --no-wait) or with a unit (500ms, 30s, 5m), at most a year (flock\'s --timeout works too). Default: wait without limit. On the command line it overrides DLOCK_NO_WAIT' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -l progress-every -d 'While waiting with stderr not a terminal (a CI log), say every this often how long it has waited and how much of --wait is left (0: only the first line, when the wait starts)' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -s E -l conflict-exit-code -d 'Exit status when the lock could not be acquired' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -l min-hold -d 'Keep the lock taken until at least this long after it was acquired, judged by the lock store\'s clock, even once the command ended (dlock exits at once with its status) or dlock died: other runs see it busy until then. Same forms as --wait, at most a year; 0 is none. `dlock release --force` ends it early' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -l ttl -d 'The lease: how long the lock outlives a dlock that stops renewing it (network backends)' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -l message -d 'Say who holds the lock and why, for `status`, `list` and anyone waiting (`deploy v1.4 by $CI_JOB_URL`): at most 256 bytes of printable text (no control characters such as a newline, tab or escape; refused, not escaped). Kept with the holder record until release' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -l kill-after -d 'When the lock is lost: SIGTERM the command\'s process group, wait this long, then SIGKILL' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -s c -l command -d 'Run this one string with `$SHELL -c` (/bin/sh when SHELL is unset or empty) instead of a COMMAND after `--`, as flock -c does: `-c \'make && make install\'`' -r -f -a "(__fish_complete_command)"
complete -c dlock -n "__fish_dlock_using_subcommand run" -s b -l backend -d 'Where locks live: lock files on this machine, Redis, ZooKeeper, etcd, PostgreSQL or MySQL' -r -f -a "file\t'Lock files in a local directory (flock(2)); no server, one machine'
redis\t'A Redis server (or several, with Redlock); cluster-wide'
zk\t'A ZooKeeper ensemble; cluster-wide'
etcd\t'An etcd cluster; cluster-wide'
postgres\t'A PostgreSQL database (tables of dlock\'s own); cluster-wide'
mysql\t'A MySQL or MariaDB database (tables of dlock\'s own); cluster-wide'"
complete -c dlock -n "__fish_dlock_using_subcommand run" -s u -l url -d 'The backend\'s address: a directory (or file:///dir) for file, redis://[user:password@]host:port[/db] (give it 3, 5, ... times for Redlock) or redis+sentinel://[user:password@]host:port,host:port/MASTER[/db][?sentinel_password=P] or redis+cluster://[user:password@]host:port,host:port (rediss+cluster:// for TLS), zk://[user:password@]host:port,host:port[/chroot], etcd://[user:password@]host:port,host:port (etcds:// for TLS), postgres://..., mysql://... DLOCK_URL and the configuration file\'s url may list several, separated by commas or spaces' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -l password-file -d 'Read the servers\' password from the first line of this file, for every URL that has none (after its user name, if it has one), so that no password is on a command line. The file must be yours or root\'s, and neither writable by others nor readable by every user' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand run" -l connect-timeout -d 'How long to try to reach a server before giving up with exit status 69 (at least 100ms)' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -l replicas -d 'Redis: wait until N replicas of the master acknowledged each acquisition and renewal (WAIT) before the command starts or the lease counts as renewed, so a failover keeps the lock' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -s x -l exclusive -d 'Take the lock exclusively (the default; flock\'s -e works too)'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s s -l shared -d 'Take the lock shared: shared holders run together, never alongside an exclusive one'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s t -l tree -d 'Treat each NAME as a path in a hierarchy: lock every ancestor shared and the path itself exclusively (or shared, with --shared)'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s n -l no-wait -d 'Fail at once if the lock is busy (flock\'s --nonblock and --nb work too). On the command line it overrides DLOCK_WAIT'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s v -l verbose -d 'Print timestamped events on stderr: waiting and for whom, acquired, renewed, lost, exited'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s q -l quiet -d 'Print nothing but errors'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand status" -s b -l backend -d 'Where locks live: lock files on this machine, Redis, ZooKeeper, etcd, PostgreSQL or MySQL' -r -f -a "file\t'Lock files in a local directory (flock(2)); no server, one machine'
redis\t'A Redis server (or several, with Redlock); cluster-wide'
zk\t'A ZooKeeper ensemble; cluster-wide'
etcd\t'An etcd cluster; cluster-wide'
postgres\t'A PostgreSQL database (tables of dlock\'s own); cluster-wide'
mysql\t'A MySQL or MariaDB database (tables of dlock\'s own); cluster-wide'"
complete -c dlock -n "__fish_dlock_using_subcommand status" -s u -l url -d 'The backend\'s address: a directory (or file:///dir) for file, redis://[user:password@]host:port[/db] (give it 3, 5, ... times for Redlock) or redis+sentinel://[user:password@]host:port,host:port/MASTER[/db][?sentinel_password=P] or redis+cluster://[user:password@]host:port,host:port (rediss+cluster:// for TLS), zk://[user:password@]host:port,host:port[/chroot], etcd://[user:password@]host:port,host:port (etcds:// for TLS), postgres://..., mysql://... DLOCK_URL and the configuration file\'s url may list several, separated by commas or spaces' -r
complete -c dlock -n "__fish_dlock_using_subcommand status" -l password-file -d 'Read the servers\' password from the first line of this file, for every URL that has none (after its user name, if it has one), so that no password is on a command line. The file must be yours or root\'s, and neither writable by others nor readable by every user' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand status" -l connect-timeout -d 'How long to try to reach a server before giving up with exit status 69 (at least 100ms)' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand status" -l replicas -d 'Redis: wait until N replicas of the master acknowledged each acquisition and renewal (WAIT) before the command starts or the lease counts as renewed, so a failover keeps the lock' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand status" -l json -d 'Print JSON: name, held, location, holders (mode, host, pid, owner, since, token, message, expires_at: the lease\'s end by the server\'s clock, null without a lease; kept_until: until when --min-hold keeps the lock, null without one) and waiters (in line, first first; null where the backend keeps no line)'
complete -c dlock -n "__fish_dlock_using_subcommand status" -s v -l verbose -d 'Print timestamped events on stderr: waiting and for whom, acquired, renewed, lost, exited'
complete -c dlock -n "__fish_dlock_using_subcommand status" -s q -l quiet -d 'Print nothing but errors'
complete -c dlock -n "__fish_dlock_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand list" -s b -l backend -d 'Where locks live: lock files on this machine, Redis, ZooKeeper, etcd, PostgreSQL or MySQL' -r -f -a "file\t'Lock files in a local directory (flock(2)); no server, one machine'
redis\t'A Redis server (or several, with Redlock); cluster-wide'
zk\t'A ZooKeeper ensemble; cluster-wide'
etcd\t'An etcd cluster; cluster-wide'
postgres\t'A PostgreSQL database (tables of dlock\'s own); cluster-wide'
mysql\t'A MySQL or MariaDB database (tables of dlock\'s own); cluster-wide'"
complete -c dlock -n "__fish_dlock_using_subcommand list" -s u -l url -d 'The backend\'s address: a directory (or file:///dir) for file, redis://[user:password@]host:port[/db] (give it 3, 5, ... times for Redlock) or redis+sentinel://[user:password@]host:port,host:port/MASTER[/db][?sentinel_password=P] or redis+cluster://[user:password@]host:port,host:port (rediss+cluster:// for TLS), zk://[user:password@]host:port,host:port[/chroot], etcd://[user:password@]host:port,host:port (etcds:// for TLS), postgres://..., mysql://... DLOCK_URL and the configuration file\'s url may list several, separated by commas or spaces' -r
complete -c dlock -n "__fish_dlock_using_subcommand list" -l password-file -d 'Read the servers\' password from the first line of this file, for every URL that has none (after its user name, if it has one), so that no password is on a command line. The file must be yours or root\'s, and neither writable by others nor readable by every user' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand list" -l connect-timeout -d 'How long to try to reach a server before giving up with exit status 69 (at least 100ms)' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand list" -l replicas -d 'Redis: wait until N replicas of the master acknowledged each acquisition and renewal (WAIT) before the command starts or the lease counts as renewed, so a failover keeps the lock' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand list" -l json -d 'Print a JSON array of what `status --json` prints, one per held lock'
complete -c dlock -n "__fish_dlock_using_subcommand list" -s v -l verbose -d 'Print timestamped events on stderr: waiting and for whom, acquired, renewed, lost, exited'
complete -c dlock -n "__fish_dlock_using_subcommand list" -s q -l quiet -d 'Print nothing but errors'
complete -c dlock -n "__fish_dlock_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s l -l limit -d 'Take one of N seats: at most N holders with --limit at once (a semaphore)' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s w -l wait -d 'Give up after waiting this long: seconds (120, 0.5; 0 is --no-wait) or with a unit (500ms, 30s, 5m), at most a year (flock\'s --timeout works too). Default: wait without limit. On the command line it overrides DLOCK_NO_WAIT' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l progress-every -d 'While waiting with stderr not a terminal (a CI log), say every this often how long it has waited and how much of --wait is left (0: only the first line, when the wait starts)' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s E -l conflict-exit-code -d 'Exit status when the lock could not be acquired' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l min-hold -d 'Keep the lock taken until at least this long after it was acquired, judged by the lock store\'s clock, even once the command ended (dlock exits at once with its status) or dlock died: other runs see it busy until then. Same forms as --wait, at most a year; 0 is none. `dlock release --force` ends it early' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l ttl -d 'The lease: how long the lock outlives a dlock that stops renewing it (network backends)' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l message -d 'Say who holds the lock and why, for `status`, `list` and anyone waiting (`deploy v1.4 by $CI_JOB_URL`): at most 256 bytes of printable text (no control characters such as a newline, tab or escape; refused, not escaped). Kept with the holder record until release' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s b -l backend -d 'Where locks live: lock files on this machine, Redis, ZooKeeper, etcd, PostgreSQL or MySQL' -r -f -a "file\t'Lock files in a local directory (flock(2)); no server, one machine'
redis\t'A Redis server (or several, with Redlock); cluster-wide'
zk\t'A ZooKeeper ensemble; cluster-wide'
etcd\t'An etcd cluster; cluster-wide'
postgres\t'A PostgreSQL database (tables of dlock\'s own); cluster-wide'
mysql\t'A MySQL or MariaDB database (tables of dlock\'s own); cluster-wide'"
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s u -l url -d 'The backend\'s address: a directory (or file:///dir) for file, redis://[user:password@]host:port[/db] (give it 3, 5, ... times for Redlock) or redis+sentinel://[user:password@]host:port,host:port/MASTER[/db][?sentinel_password=P] or redis+cluster://[user:password@]host:port,host:port (rediss+cluster:// for TLS), zk://[user:password@]host:port,host:port[/chroot], etcd://[user:password@]host:port,host:port (etcds:// for TLS), postgres://..., mysql://... DLOCK_URL and the configuration file\'s url may list several, separated by commas or spaces' -r
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l password-file -d 'Read the servers\' password from the first line of this file, for every URL that has none (after its user name, if it has one), so that no password is on a command line. The file must be yours or root\'s, and neither writable by others nor readable by every user' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l connect-timeout -d 'How long to try to reach a server before giving up with exit status 69 (at least 100ms)' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l replicas -d 'Redis: wait until N replicas of the master acknowledged each acquisition and renewal (WAIT) before the command starts or the lease counts as renewed, so a failover keeps the lock' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s x -l exclusive -d 'Take the lock exclusively (the default; flock\'s -e works too)'
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s s -l shared -d 'Take the lock shared: shared holders run together, never alongside an exclusive one'
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s t -l tree -d 'Treat each NAME as a path in a hierarchy: lock every ancestor shared and the path itself exclusively (or shared, with --shared)'
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s n -l no-wait -d 'Fail at once if the lock is busy (flock\'s --nonblock and --nb work too). On the command line it overrides DLOCK_WAIT'
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s v -l verbose -d 'Print timestamped events on stderr: waiting and for whom, acquired, renewed, lost, exited'
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s q -l quiet -d 'Print nothing but errors'
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand release" -s b -l backend -d 'Where locks live: lock files on this machine, Redis, ZooKeeper, etcd, PostgreSQL or MySQL' -r -f -a "file\t'Lock files in a local directory (flock(2)); no server, one machine'
redis\t'A Redis server (or several, with Redlock); cluster-wide'
zk\t'A ZooKeeper ensemble; cluster-wide'
etcd\t'An etcd cluster; cluster-wide'
postgres\t'A PostgreSQL database (tables of dlock\'s own); cluster-wide'
mysql\t'A MySQL or MariaDB database (tables of dlock\'s own); cluster-wide'"
complete -c dlock -n "__fish_dlock_using_subcommand release" -s u -l url -d 'The backend\'s address: a directory (or file:///dir) for file, redis://[user:password@]host:port[/db] (give it 3, 5, ... times for Redlock) or redis+sentinel://[user:password@]host:port,host:port/MASTER[/db][?sentinel_password=P] or redis+cluster://[user:password@]host:port,host:port (rediss+cluster:// for TLS), zk://[user:password@]host:port,host:port[/chroot], etcd://[user:password@]host:port,host:port (etcds:// for TLS), postgres://..., mysql://... DLOCK_URL and the configuration file\'s url may list several, separated by commas or spaces' -r
complete -c dlock -n "__fish_dlock_using_subcommand release" -l password-file -d 'Read the servers\' password from the first line of this file, for every URL that has none (after its user name, if it has one), so that no password is on a command line. The file must be yours or root\'s, and neither writable by others nor readable by every user' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand release" -l connect-timeout -d 'How long to try to reach a server before giving up with exit status 69 (at least 100ms)' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand release" -l replicas -d 'Redis: wait until N replicas of the master acknowledged each acquisition and renewal (WAIT) before the command starts or the lease counts as renewed, so a failover keeps the lock' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand release" -l force -d 'Break the lock for whoever holds it, instead of giving up this shell\'s `dlock hold`'
complete -c dlock -n "__fish_dlock_using_subcommand release" -s v -l verbose -d 'Print timestamped events on stderr: waiting and for whom, acquired, renewed, lost, exited'
complete -c dlock -n "__fish_dlock_using_subcommand release" -s q -l quiet -d 'Print nothing but errors'
complete -c dlock -n "__fish_dlock_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand generate" -l out -d 'The directory to write man/ and completions/ into (created if missing)' -r -f -a "(__fish_complete_directories)"
complete -c dlock -n "__fish_dlock_using_subcommand generate" -s b -l backend -d 'Where locks live: lock files on this machine, Redis, ZooKeeper, etcd, PostgreSQL or MySQL' -r -f -a "file\t'Lock files in a local directory (flock(2)); no server, one machine'
redis\t'A Redis server (or several, with Redlock); cluster-wide'
zk\t'A ZooKeeper ensemble; cluster-wide'
etcd\t'An etcd cluster; cluster-wide'
postgres\t'A PostgreSQL database (tables of dlock\'s own); cluster-wide'
mysql\t'A MySQL or MariaDB database (tables of dlock\'s own); cluster-wide'"
complete -c dlock -n "__fish_dlock_using_subcommand generate" -s u -l url -d 'The backend\'s address: a directory (or file:///dir) for file, redis://[user:password@]host:port[/db] (give it 3, 5, ... times for Redlock) or redis+sentinel://[user:password@]host:port,host:port/MASTER[/db][?sentinel_password=P] or redis+cluster://[user:password@]host:port,host:port (rediss+cluster:// for TLS), zk://[user:password@]host:port,host:port[/chroot], etcd://[user:password@]host:port,host:port (etcds:// for TLS), postgres://..., mysql://... DLOCK_URL and the configuration file\'s url may list several, separated by commas or spaces' -r
complete -c dlock -n "__fish_dlock_using_subcommand generate" -l password-file -d 'Read the servers\' password from the first line of this file, for every URL that has none (after its user name, if it has one), so that no password is on a command line. The file must be yours or root\'s, and neither writable by others nor readable by every user' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand generate" -l connect-timeout -d 'How long to try to reach a server before giving up with exit status 69 (at least 100ms)' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand generate" -l replicas -d 'Redis: wait until N replicas of the master acknowledged each acquisition and renewal (WAIT) before the command starts or the lease counts as renewed, so a failover keeps the lock' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand generate" -s v -l verbose -d 'Print timestamped events on stderr: waiting and for whom, acquired, renewed, lost, exited'
complete -c dlock -n "__fish_dlock_using_subcommand generate" -s q -l quiet -d 'Print nothing but errors'
complete -c dlock -n "__fish_dlock_using_subcommand generate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from run status list hold release generate help" -f -a "run" -d 'Acquire the lock, run COMMAND while holding it, release it when COMMAND exits'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from run status list hold release generate help" -f -a "status" -d 'Show who holds a lock. Exit status 0 when held, 1 when free'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from run status list hold release generate help" -f -a "list" -d 'List every lock currently held'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from run status list hold release generate help" -f -a "hold" -d 'Hold the lock for the rest of the calling shell script: return once it is held, leaving a keeper that renews it until the script\'s shell exits or runs `dlock release NAME`'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from run status list hold release generate help" -f -a "release" -d 'Give up early what this shell took with `dlock hold`; with --force, break a lock for whoever holds it (for an operator cleaning up after a dead holder)'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from run status list hold release generate help" -f -a "generate" -d 'Write the man pages (DIR/man) and the bash, zsh and fish completions (DIR/completions) of this dlock, for the backends it was built with'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from run status list hold release generate help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'

# Lock names held now on the backend dlock is configured for, for the NAME of run, status, hold
# and release; after run's `--`, a command and its arguments.
function __fish_dlock_after_dashes
    contains -- -- (commandline -opc)
end
function __fish_dlock_command_after_dashes
    set -l at (contains -i -- -- (commandline -opc))
    __fish_complete_subcommand --fcs-skip=$at
end
complete -c dlock -n "__fish_seen_subcommand_from run status hold release; and not __fish_dlock_after_dashes" -f -a "(dlock list 2>/dev/null | string split -f1 \t | sort -u)"
complete -c dlock -n "__fish_seen_subcommand_from run; and __fish_dlock_after_dashes" -f -a "(__fish_dlock_command_after_dashes)"
