//! The one classification of a server's refusal of the *environment*: an
//! answer that says this server, as configured for this user, cannot run
//! the test at all — not that the queue did something. Every command
//! (explore, run, exhaust, replay, chaos) stops on one with exit 69 and the
//! refusal as the server wrote it; none turns it into a verdict.
//!
//! The server's wording differs by where the command ran: `NOPERM User u
//! has no permissions to run the 'zrem' command` outside a script, `ERR
//! ACL failure in script: ...` inside one on Valkey, `ERR The user
//! executing the script can't run this command ...` on Redis 7. All of
//! them are the same refusal, so all are matched here, and nowhere else.

/// What a refusal of the environment says is missing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The credentials or the ACL: `NOAUTH`, `WRONGPASS`, `NOPERM`, the
    /// client's `authentication failed`, an ACL failure inside a script.
    Access,
    /// A command the queue calls does not exist on this server (`ERR
    /// unknown command`, in or out of a script).
    MissingCommand,
    /// The server is a read-only replica (`READONLY`). A run whose faults
    /// move the primary meets this while a failover settles, so such a
    /// run may count it as an error of the moment rather than stop.
    ReadOnly,
}

/// The refusal of the environment a server error is, if it is one: `code`
/// is the error's first word (`NOPERM`, `ERR`, ...), `message` the rest.
pub fn environment_refusal(code: &str, message: &str) -> Option<Refusal> {
    match code {
        "NOAUTH" | "WRONGPASS" | "NOPERM" | "authentication failed" => {
            return Some(Refusal::Access)
        }
        "READONLY" => return Some(Refusal::ReadOnly),
        _ => {}
    }
    let message = message.to_ascii_lowercase();
    let has = |s: &str| message.contains(s);
    if has("acl failure") || has("no permissions to") || has("user executing the script can't") {
        Some(Refusal::Access)
    } else if has("unknown command") || has("unknown redis command") {
        Some(Refusal::MissingCommand)
    } else if has("readonly you can't write") || has("read only replica") {
        Some(Refusal::ReadOnly)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_server_s_wording_of_an_acl_or_missing_command_refusal_is_one_refusal() {
        let cases = [
            ("NOPERM", "User u has no permissions to run the 'zrem' command", Some(Refusal::Access)),
            (
                "ERR",
                "ACL failure in script: User u has no permissions to run the 'zrem' command script: on @user_function:446.",
                Some(Refusal::Access),
            ),
            (
                "ERR",
                "The user executing the script can't run this command or subcommand script: 91c7, on @user_script:1.",
                Some(Refusal::Access),
            ),
            ("WRONGPASS", "invalid username-password pair", Some(Refusal::Access)),
            ("ERR", "unknown command 'FCALL', with args beginning with: ", Some(Refusal::MissingCommand)),
            ("ERR", "Unknown Redis command called from script script: fa3d", Some(Refusal::MissingCommand)),
            ("READONLY", "You can't write against a read only replica.", Some(Refusal::ReadOnly)),
            ("OOM", "command not allowed when used memory > 'maxmemory'.", None),
            ("ERR", "Error running script: attempt to compare nil", None),
            ("BUSY", "Valkey is busy running a script.", None),
        ];
        for (code, message, want) in cases {
            assert_eq!(environment_refusal(code, message), want, "{code} {message}");
        }
    }
}
