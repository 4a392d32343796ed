//! What clap_complete's scripts cannot do, added to them: lock names from `dlock list` (held now)
//! and `dlock list --runs` (that ran, held or free), one bound for both, on the
//! backend the line's own -b/-u name, or else the one dlock is configured for (DLOCK_BACKEND,
//! DLOCK_URL, the configuration file), for the NAME of run, status, hold and release; and, after
//! run's `--`, a command and its arguments. Asking the backend is bounded (timeout(1) where there
//! is one, and --connect-timeout), so a backend that does not answer costs a TAB well under a
//! second; a name with spaces is one candidate, quoted.

use clap_complete::Shell;

/// The file name and text of `shell`'s completions, from what clap_complete generated for
/// `command`.
pub fn finish(shell: Shell, generated: String, command: &clap::Command) -> (&'static str, String) {
    match shell {
        Shell::Zsh => ("_dlock", zsh(generated)),
        Shell::Fish => ("dlock.fish", format!("{generated}{FISH}")),
        _ => ("dlock.bash", bash(generated, command)),
    }
}

/// The options that take a value (`-w DURATION`), whose value is not a lock name.
fn taking_values(command: &clap::Command) -> String {
    let args = command
        .get_arguments()
        .chain(command.get_subcommands().flat_map(|s| s.get_arguments()));
    let mut words: Vec<String> = Vec::new();
    for arg in args.filter(|a| a.get_action().takes_values() && !a.is_positional()) {
        words.extend(arg.get_short().map(|s| format!("-{s}")));
        words.extend(arg.get_long().map(|l| format!("--{l}")));
    }
    words.sort();
    words.dedup();
    words.join(" ")
}

const BASH: &str = r#"
# Lock names held now or that ran, one a line: on the backend the line's -b/-u name (typed before
# the word being completed), else the configured one; given up after well under a second. The
# line is split at blanks whatever IFS the caller set.
_dlock_lock_names() {
    local -a typed args=() bound=()
    local i word IFS=$' \t\n'
    if [[ -n "$COMP_LINE" ]]; then
        read -ra typed <<< "${COMP_LINE:0:COMP_POINT}"
    else
        typed=("${COMP_WORDS[@]:0:COMP_CWORD}")
    fi
    for ((i = 1; i < ${#typed[@]}; i++)); do
        word="${typed[i]}"
        [[ "$word" == -- ]] && break
        case "$word" in
            -b|--backend|-u|--url) args+=("$word" "${typed[i+1]}"); ((i++)) ;;
            --backend=*|--url=*|-b?*|-u?*) args+=("$word") ;;
        esac
    done
    command -v timeout >/dev/null 2>&1 && bound=(timeout 0.8)
    "${bound[@]}" sh -c "$_dlock_list_both" dlock "${args[@]}" --connect-timeout 500ms 2>/dev/null \
        | cut -f1 | sort -u
}

# clap's completion, with lock names for NAME and a command after run's `--`.
_dlock_dynamic() {
    local i word sub="" dashes=0
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}"
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${COMP_WORDS[i]}"
        if [[ "$word" == -- ]]; then
            dashes=$i
            break
        fi
        if [[ -z "$sub" && " run status list hold release help " == *" $word "* ]]; then
            sub="$word"
        fi
    done
    if [[ "$sub" == run && $dashes -gt 0 ]]; then
        if declare -F _command_offset >/dev/null; then
            _command_offset $((dashes + 1))
        elif [[ $COMP_CWORD -eq $((dashes + 1)) ]]; then
            COMPREPLY=($(compgen -c -- "$cur"))
        else
            COMPREPLY=($(compgen -f -- "$cur"))
        fi
        return 0
    fi
    if [[ " run status hold release " == *" $sub "* && "$cur" != -* \
          && " $_dlock_taking_values " != *" $prev "* ]]; then
        # One candidate a line (a name may have spaces), quoted for the line.
        local name IFS=$'\n'
        COMPREPLY=()
        for name in $(_dlock_lock_names); do
            [[ "$name" == "$cur"* ]] && COMPREPLY+=("$(printf '%q' "$name")")
        done
        return 0
    fi
    _dlock "$@"
}

"#;

fn bash(generated: String, command: &clap::Command) -> String {
    let registration = "if [[ \"${BASH_VERSINFO[0]}\" -eq 4";
    let at = generated.find(registration).unwrap_or(generated.len());
    let (functions, register) = generated.split_at(at);
    format!(
        "{functions}_dlock_taking_values=\"{}\"\n\
         _dlock_list_both='\"$0\" \"$@\" list; \"$0\" \"$@\" list --runs'\n{BASH}{}",
        taking_values(command),
        register.replace("complete -F _dlock ", "complete -F _dlock_dynamic ")
    )
}

const ZSH: &str = r#"(( $+functions[_dlock_lock_names] )) ||
_dlock_lock_names() {
    if [[ $LBUFFER == *' -- '* ]]; then
        # After run's `--` (which _arguments -S takes away): a command and its arguments.
        local rest=${LBUFFER#* -- }
        words=(${(z)rest})
        [[ -z $rest || $rest == *' ' ]] && words+=('')
        CURRENT=$#words
        _normal
        return
    fi
    # The backend the line's -b/-u name, else the configured one; given up after well under a
    # second. (The words before the cursor, from the line: _arguments has cut $words down to the
    # subcommand's.)
    local -a typed args bound names
    local i
    typed=(${(Q)${(z)LBUFFER}})
    for (( i = 2; i <= $#typed; i++ )); do
        case $typed[i] in
            --) break ;;
            -b|--backend|-u|--url) args+=($typed[i] $typed[i+1]); (( i++ )) ;;
            --backend=*|--url=*|-b?*|-u?*) args+=($typed[i]) ;;
        esac
    done
    (( $+commands[timeout] )) && bound=(timeout 0.8)
    names=(${(f)"$($bound sh -c '"$0" "$@" list; "$0" "$@" list --runs' dlock $args \
        --connect-timeout 500ms 2>/dev/null | cut -f1 | sort -u)"})
    compadd -a names
}

"#;

/// Lock names for NAME (clap leaves it to `_default`, which offers file names), and a command
/// after run's `--` (clap's spec has no argument for it).
fn zsh(generated: String) -> String {
    let named: Vec<String> = generated
        .lines()
        .map(|line| {
            let is_name = line.contains(":names -- ") || line.contains(":name -- ");
            match line.strip_suffix(":_default' \\") {
                Some(start) if is_name => format!("{start}:_dlock_lock_names' \\"),
                _ => line.to_owned(),
            }
        })
        .collect();
    let text = named.join("\n") + "\n";
    let at = text
        .find("if [ \"$funcstack[1]\" = \"_dlock\" ]")
        .unwrap_or(text.len());
    format!("{}{ZSH}{}", &text[..at], &text[at..])
}

const FISH: &str = r#"
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
"#;
