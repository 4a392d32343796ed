# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_dlock_global_optspecs
    string join \n b/backend= u/url= password-file= connect-timeout= trust-owner= replicas= v/verbose q/quiet h/help V/version
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

complete -c dlock -n "__fish_dlock_needs_command" -s b -l backend -d 'Where locks live (default: file)' -r -f -a "file\t'Lock files in a local directory (flock(2)); no server, one machine'
redis\t'A Redis server (or several, with Redlock); cluster-wide'
zk\t'A ZooKeeper ensemble; cluster-wide'
etcd\t'An etcd cluster; cluster-wide'
postgres\t'A PostgreSQL database (tables of dlock\'s own); cluster-wide'
mysql\t'A MySQL or MariaDB database (tables of dlock\'s own); cluster-wide'
elasticsearch\t'An Elasticsearch or OpenSearch cluster (an index of dlock\'s own); cluster-wide'"
complete -c dlock -n "__fish_dlock_needs_command" -s u -l url -d 'The backend\'s address (--help: the forms)' -r
complete -c dlock -n "__fish_dlock_needs_command" -l password-file -d 'Read the servers\' password from a file' -r -F
complete -c dlock -n "__fish_dlock_needs_command" -l connect-timeout -d 'Give up reaching a server after this' -r -f
complete -c dlock -n "__fish_dlock_needs_command" -l trust-owner -d 'As root: trust USER\'s lock files too' -r -f -a "(__fish_complete_users)"
complete -c dlock -n "__fish_dlock_needs_command" -l replicas -d 'Redis: replicas that must acknowledge' -r -f
complete -c dlock -n "__fish_dlock_needs_command" -s v -l verbose -d 'Print timestamped events on stderr'
complete -c dlock -n "__fish_dlock_needs_command" -s q -l quiet -d 'Print nothing but errors'
complete -c dlock -n "__fish_dlock_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_needs_command" -s V -l version -d 'Print version'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "run" -d 'Run COMMAND while holding the lock'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "status" -d 'Show who holds a lock. Exit status 0 when held, 1 when free'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "list" -d 'List every lock currently held'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "hold" -d 'Hold the lock for the rest of the calling shell script'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "release" -d 'Give up what this shell took with `dlock hold` (--force: anyone\'s)'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "config" -d 'Show the settings in force and where each came from'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "generate" -d 'Write the man pages and shell completions into --out DIR'
complete -c dlock -n "__fish_dlock_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s l -l limit -d 'Take one of N seats (a semaphore)' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -s w -l wait -d 'Give up after waiting this long' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -l progress-every -d 'In a log, report the wait this often' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -s E -l conflict-exit-code -d 'Exit status when the lock is busy' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -l min-hold -d 'Keep the lock at least this long' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -l ttl -d 'The lease, on network backends' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -l message -d 'Say who holds the lock and why' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -l kill-after -d 'On loss: SIGTERM, this long, SIGKILL' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -s c -l command -d 'A shell command instead of -- COMMAND' -r -f -a "(__fish_complete_command)"
complete -c dlock -n "__fish_dlock_using_subcommand run" -s b -l backend -d 'Where locks live (default: file)' -r -f -a "file\t'Lock files in a local directory (flock(2)); no server, one machine'
redis\t'A Redis server (or several, with Redlock); cluster-wide'
zk\t'A ZooKeeper ensemble; cluster-wide'
etcd\t'An etcd cluster; cluster-wide'
postgres\t'A PostgreSQL database (tables of dlock\'s own); cluster-wide'
mysql\t'A MySQL or MariaDB database (tables of dlock\'s own); cluster-wide'
elasticsearch\t'An Elasticsearch or OpenSearch cluster (an index of dlock\'s own); cluster-wide'"
complete -c dlock -n "__fish_dlock_using_subcommand run" -s u -l url -d 'The backend\'s address (--help: the forms)' -r
complete -c dlock -n "__fish_dlock_using_subcommand run" -l password-file -d 'Read the servers\' password from a file' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand run" -l connect-timeout -d 'Give up reaching a server after this' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -l trust-owner -d 'As root: trust USER\'s lock files too' -r -f -a "(__fish_complete_users)"
complete -c dlock -n "__fish_dlock_using_subcommand run" -l replicas -d 'Redis: replicas that must acknowledge' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand run" -s x -l exclusive -d 'Take the lock exclusively (the default)'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s s -l shared -d 'Take the lock shared'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s t -l tree -d 'Lock NAME\'s ancestors shared too'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s n -l no-wait -d 'Fail at once if the lock is busy'
complete -c dlock -n "__fish_dlock_using_subcommand run" -l release-on-failure -d 'Free a --min-hold lock if the command fails'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s o -l close -d 'flock\'s -o/--close, accepted and ignored: the command never gets the lock\'s descriptor'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s v -l verbose -d 'Print timestamped events on stderr'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s q -l quiet -d 'Print nothing but errors'
complete -c dlock -n "__fish_dlock_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand status" -l ran-within -d 'Check that the last success ended within DURATION' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand status" -s b -l backend -d 'Where locks live (default: file)' -r -f -a "file\t'Lock files in a local directory (flock(2)); no server, one machine'
redis\t'A Redis server (or several, with Redlock); cluster-wide'
zk\t'A ZooKeeper ensemble; cluster-wide'
etcd\t'An etcd cluster; cluster-wide'
postgres\t'A PostgreSQL database (tables of dlock\'s own); cluster-wide'
mysql\t'A MySQL or MariaDB database (tables of dlock\'s own); cluster-wide'
elasticsearch\t'An Elasticsearch or OpenSearch cluster (an index of dlock\'s own); cluster-wide'"
complete -c dlock -n "__fish_dlock_using_subcommand status" -s u -l url -d 'The backend\'s address (--help: the forms)' -r
complete -c dlock -n "__fish_dlock_using_subcommand status" -l password-file -d 'Read the servers\' password from a file' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand status" -l connect-timeout -d 'Give up reaching a server after this' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand status" -l trust-owner -d 'As root: trust USER\'s lock files too' -r -f -a "(__fish_complete_users)"
complete -c dlock -n "__fish_dlock_using_subcommand status" -l replicas -d 'Redis: replicas that must acknowledge' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand status" -l json -d 'Print JSON'
complete -c dlock -n "__fish_dlock_using_subcommand status" -s v -l verbose -d 'Print timestamped events on stderr'
complete -c dlock -n "__fish_dlock_using_subcommand status" -s q -l quiet -d 'Print nothing but errors'
complete -c dlock -n "__fish_dlock_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand list" -s b -l backend -d 'Where locks live (default: file)' -r -f -a "file\t'Lock files in a local directory (flock(2)); no server, one machine'
redis\t'A Redis server (or several, with Redlock); cluster-wide'
zk\t'A ZooKeeper ensemble; cluster-wide'
etcd\t'An etcd cluster; cluster-wide'
postgres\t'A PostgreSQL database (tables of dlock\'s own); cluster-wide'
mysql\t'A MySQL or MariaDB database (tables of dlock\'s own); cluster-wide'
elasticsearch\t'An Elasticsearch or OpenSearch cluster (an index of dlock\'s own); cluster-wide'"
complete -c dlock -n "__fish_dlock_using_subcommand list" -s u -l url -d 'The backend\'s address (--help: the forms)' -r
complete -c dlock -n "__fish_dlock_using_subcommand list" -l password-file -d 'Read the servers\' password from a file' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand list" -l connect-timeout -d 'Give up reaching a server after this' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand list" -l trust-owner -d 'As root: trust USER\'s lock files too' -r -f -a "(__fish_complete_users)"
complete -c dlock -n "__fish_dlock_using_subcommand list" -l replicas -d 'Redis: replicas that must acknowledge' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand list" -l json -d 'Print a JSON array of what `status --json` prints, one per held lock'
complete -c dlock -n "__fish_dlock_using_subcommand list" -l runs -d 'Every lock with a last run on record, a line each: NAME, a tab, held or free, its last run, and its last success when that is another run (--json: name, held, last_run, last_success)'
complete -c dlock -n "__fish_dlock_using_subcommand list" -s v -l verbose -d 'Print timestamped events on stderr'
complete -c dlock -n "__fish_dlock_using_subcommand list" -s q -l quiet -d 'Print nothing but errors'
complete -c dlock -n "__fish_dlock_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s l -l limit -d 'Take one of N seats (a semaphore)' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s w -l wait -d 'Give up after waiting this long' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l progress-every -d 'In a log, report the wait this often' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s E -l conflict-exit-code -d 'Exit status when the lock is busy' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l min-hold -d 'Keep the lock at least this long' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l ttl -d 'The lease, on network backends' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l message -d 'Say who holds the lock and why' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l owner -d 'Hold for process PID (`--owner $$`)' -r
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s b -l backend -d 'Where locks live (default: file)' -r -f -a "file\t'Lock files in a local directory (flock(2)); no server, one machine'
redis\t'A Redis server (or several, with Redlock); cluster-wide'
zk\t'A ZooKeeper ensemble; cluster-wide'
etcd\t'An etcd cluster; cluster-wide'
postgres\t'A PostgreSQL database (tables of dlock\'s own); cluster-wide'
mysql\t'A MySQL or MariaDB database (tables of dlock\'s own); cluster-wide'
elasticsearch\t'An Elasticsearch or OpenSearch cluster (an index of dlock\'s own); cluster-wide'"
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s u -l url -d 'The backend\'s address (--help: the forms)' -r
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l password-file -d 'Read the servers\' password from a file' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l connect-timeout -d 'Give up reaching a server after this' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l trust-owner -d 'As root: trust USER\'s lock files too' -r -f -a "(__fish_complete_users)"
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l replicas -d 'Redis: replicas that must acknowledge' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s x -l exclusive -d 'Take the lock exclusively (the default)'
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s s -l shared -d 'Take the lock shared'
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s t -l tree -d 'Lock NAME\'s ancestors shared too'
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s n -l no-wait -d 'Fail at once if the lock is busy'
complete -c dlock -n "__fish_dlock_using_subcommand hold" -l print-env -d 'Print the lock\'s variables for eval'
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s v -l verbose -d 'Print timestamped events on stderr'
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s q -l quiet -d 'Print nothing but errors'
complete -c dlock -n "__fish_dlock_using_subcommand hold" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand release" -s b -l backend -d 'Where locks live (default: file)' -r -f -a "file\t'Lock files in a local directory (flock(2)); no server, one machine'
redis\t'A Redis server (or several, with Redlock); cluster-wide'
zk\t'A ZooKeeper ensemble; cluster-wide'
etcd\t'An etcd cluster; cluster-wide'
postgres\t'A PostgreSQL database (tables of dlock\'s own); cluster-wide'
mysql\t'A MySQL or MariaDB database (tables of dlock\'s own); cluster-wide'
elasticsearch\t'An Elasticsearch or OpenSearch cluster (an index of dlock\'s own); cluster-wide'"
complete -c dlock -n "__fish_dlock_using_subcommand release" -s u -l url -d 'The backend\'s address (--help: the forms)' -r
complete -c dlock -n "__fish_dlock_using_subcommand release" -l password-file -d 'Read the servers\' password from a file' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand release" -l connect-timeout -d 'Give up reaching a server after this' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand release" -l trust-owner -d 'As root: trust USER\'s lock files too' -r -f -a "(__fish_complete_users)"
complete -c dlock -n "__fish_dlock_using_subcommand release" -l replicas -d 'Redis: replicas that must acknowledge' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand release" -l force -d 'Break the lock for whoever holds it, instead of giving up this shell\'s `dlock hold`'
complete -c dlock -n "__fish_dlock_using_subcommand release" -s v -l verbose -d 'Print timestamped events on stderr'
complete -c dlock -n "__fish_dlock_using_subcommand release" -s q -l quiet -d 'Print nothing but errors'
complete -c dlock -n "__fish_dlock_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand config" -s b -l backend -d 'Where locks live (default: file)' -r -f -a "file\t'Lock files in a local directory (flock(2)); no server, one machine'
redis\t'A Redis server (or several, with Redlock); cluster-wide'
zk\t'A ZooKeeper ensemble; cluster-wide'
etcd\t'An etcd cluster; cluster-wide'
postgres\t'A PostgreSQL database (tables of dlock\'s own); cluster-wide'
mysql\t'A MySQL or MariaDB database (tables of dlock\'s own); cluster-wide'
elasticsearch\t'An Elasticsearch or OpenSearch cluster (an index of dlock\'s own); cluster-wide'"
complete -c dlock -n "__fish_dlock_using_subcommand config" -s u -l url -d 'The backend\'s address (--help: the forms)' -r
complete -c dlock -n "__fish_dlock_using_subcommand config" -l password-file -d 'Read the servers\' password from a file' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand config" -l connect-timeout -d 'Give up reaching a server after this' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand config" -l trust-owner -d 'As root: trust USER\'s lock files too' -r -f -a "(__fish_complete_users)"
complete -c dlock -n "__fish_dlock_using_subcommand config" -l replicas -d 'Redis: replicas that must acknowledge' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand config" -s v -l verbose -d 'Print timestamped events on stderr'
complete -c dlock -n "__fish_dlock_using_subcommand config" -s q -l quiet -d 'Print nothing but errors'
complete -c dlock -n "__fish_dlock_using_subcommand config" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand generate" -l out -d 'The directory to write man/ and completions/ into (created if missing)' -r -f -a "(__fish_complete_directories)"
complete -c dlock -n "__fish_dlock_using_subcommand generate" -s b -l backend -d 'Where locks live (default: file)' -r -f -a "file\t'Lock files in a local directory (flock(2)); no server, one machine'
redis\t'A Redis server (or several, with Redlock); cluster-wide'
zk\t'A ZooKeeper ensemble; cluster-wide'
etcd\t'An etcd cluster; cluster-wide'
postgres\t'A PostgreSQL database (tables of dlock\'s own); cluster-wide'
mysql\t'A MySQL or MariaDB database (tables of dlock\'s own); cluster-wide'
elasticsearch\t'An Elasticsearch or OpenSearch cluster (an index of dlock\'s own); cluster-wide'"
complete -c dlock -n "__fish_dlock_using_subcommand generate" -s u -l url -d 'The backend\'s address (--help: the forms)' -r
complete -c dlock -n "__fish_dlock_using_subcommand generate" -l password-file -d 'Read the servers\' password from a file' -r -F
complete -c dlock -n "__fish_dlock_using_subcommand generate" -l connect-timeout -d 'Give up reaching a server after this' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand generate" -l trust-owner -d 'As root: trust USER\'s lock files too' -r -f -a "(__fish_complete_users)"
complete -c dlock -n "__fish_dlock_using_subcommand generate" -l replicas -d 'Redis: replicas that must acknowledge' -r -f
complete -c dlock -n "__fish_dlock_using_subcommand generate" -s v -l verbose -d 'Print timestamped events on stderr'
complete -c dlock -n "__fish_dlock_using_subcommand generate" -s q -l quiet -d 'Print nothing but errors'
complete -c dlock -n "__fish_dlock_using_subcommand generate" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from run status list hold release config generate help" -f -a "run" -d 'Run COMMAND while holding the lock'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from run status list hold release config generate help" -f -a "status" -d 'Show who holds a lock. Exit status 0 when held, 1 when free'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from run status list hold release config generate help" -f -a "list" -d 'List every lock currently held'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from run status list hold release config generate help" -f -a "hold" -d 'Hold the lock for the rest of the calling shell script'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from run status list hold release config generate help" -f -a "release" -d 'Give up what this shell took with `dlock hold` (--force: anyone\'s)'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from run status list hold release config generate help" -f -a "config" -d 'Show the settings in force and where each came from'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from run status list hold release config generate help" -f -a "generate" -d 'Write the man pages and shell completions into --out DIR'
complete -c dlock -n "__fish_dlock_using_subcommand help; and not __fish_seen_subcommand_from run status list hold release config generate help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'

# Lock names held now or that ran, on the backend dlock is configured for, for the NAME of run, status, hold
# and release; after run's `--`, a command and its arguments.
function __fish_dlock_after_dashes
    contains -- -- (commandline -opc)
end
function __fish_dlock_command_after_dashes
    set -l at (contains -i -- -- (commandline -opc))
    __fish_complete_subcommand --fcs-skip=$at
end
# On the backend the line's -b/-u name, else the configured one; given up after well under a second.
function __fish_dlock_lock_names
    set -l typed (commandline -opc)
    set -l args
    set -l i 2
    while test $i -le (count $typed)
        switch $typed[$i]
            case --
                break
            case -b --backend -u --url
                set -a args $typed[$i] $typed[(math $i + 1)]
                set i (math $i + 1)
            case '--backend=*' '--url=*' '-b?*' '-u?*'
                set -a args $typed[$i]
        end
        set i (math $i + 1)
    end
    set -l bound
    command -q timeout; and set bound timeout 0.8
    $bound sh -c '"$0" "$@" list; "$0" "$@" list --runs' dlock $args --connect-timeout 500ms 2>/dev/null \
        | string split -f1 \t | sort -u
end
complete -c dlock -n "__fish_seen_subcommand_from run status hold release; and not __fish_dlock_after_dashes" -f -a "(__fish_dlock_lock_names)"
complete -c dlock -n "__fish_seen_subcommand_from run; and __fish_dlock_after_dashes" -f -a "(__fish_dlock_command_after_dashes)"
