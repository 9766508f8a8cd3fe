//! The author stamps the admission policies write (`policies/mutating/spec-author.yaml` on a
//! rollout, `policies/mutating/source-author.yaml` on a `fromConfigMap` source): one line per
//! change since the controller last declared a revision from the object, oldest first,
//! `<sequence> <user>`, the last [`AUTHOR_STAMP_LINES`] kept. Pure: read here, counted in
//! `configrollout_core::engine::RevisionAuthors`.
//!
//! A list rather than the last user, so that two people who change an object before the
//! controller declares from it (one edit refused as invalid and fixed by another, a
//! controller that was down) are both authors of what it declares.

/// Most changes a stamp keeps (the policies keep this many lines).
pub const AUTHOR_STAMP_LINES: u64 = 8;

/// Most digits of a sequence (what the policies accept and `int` holds).
const MAX_SEQUENCE_DIGITS: usize = 18;

/// An author stamp as read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuthorStamp<'a> {
    /// The changes the stamp lists, oldest first: sequence and user (empty when a relay's
    /// change named nobody).
    Changes(Vec<(u64, &'a str)>),
    /// A single user name: what the policies wrote before sequences, read as the
    /// object's one known author.
    Single(&'a str),
}

impl<'a> AuthorStamp<'a> {
    /// Reads `text`: a list of changes when every line is `<sequence> <user>` with the
    /// sequences rising; otherwise the whole text as one user name (which the caller
    /// still checks is one).
    pub fn parse(text: &'a str) -> Self {
        let mut changes: Vec<(u64, &'a str)> = Vec::new();
        for line in text.split('\n') {
            let Some((sequence, user)) = line.split_once(' ') else {
                return Self::Single(text);
            };
            let digits = !sequence.is_empty()
                && sequence.len() <= MAX_SEQUENCE_DIGITS
                && sequence.bytes().all(|byte| byte.is_ascii_digit());
            let Some(sequence) = digits.then(|| sequence.parse::<u64>().ok()).flatten() else {
                return Self::Single(text);
            };
            if changes.last().is_some_and(|(last, _)| *last >= sequence) {
                return Self::Single(text);
            }
            changes.push((sequence, user));
        }
        Self::Changes(changes)
    }

    /// The user of the latest change (for display).
    pub fn latest(&self) -> Option<&'a str> {
        match self {
            Self::Changes(changes) => changes.last().map(|(_, user)| *user),
            Self::Single(user) => Some(user),
        }
    }
}

/// The changes a stamp lists since sequence `counted` (every one it keeps when nothing
/// was counted from it yet), with whether some were dropped in between (more changes
/// since than the stamp keeps, or a stamp whose sequence went back below what was
/// counted: rewritten without the policy, or restored from a backup).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChangesSince<'a> {
    /// Users, oldest change first (repeats included).
    pub users: Vec<&'a str>,
    /// The latest sequence listed.
    pub through: Option<u64>,
    /// Whether changes since `counted` are missing from the list.
    pub incomplete: bool,
}

/// See [`ChangesSince`].
pub fn changes_since<'a>(changes: &[(u64, &'a str)], counted: Option<u64>) -> ChangesSince<'a> {
    let through = changes.last().map(|(sequence, _)| *sequence);
    let Some(counted) = counted else {
        return ChangesSince {
            users: changes.iter().map(|(_, user)| *user).collect(),
            through,
            incomplete: false,
        };
    };
    let went_back = through.is_some_and(|through| through < counted);
    let first_missing = changes
        .first()
        .is_some_and(|(first, _)| *first > counted.saturating_add(1));
    ChangesSince {
        users: changes
            .iter()
            .filter(|(sequence, _)| *sequence > counted)
            .map(|(_, user)| *user)
            .collect(),
        through,
        incomplete: went_back || first_missing,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_of_changes_is_read_and_anything_else_is_one_user() {
        assert_eq!(
            AuthorStamp::parse("3 alice\n4 system:serviceaccount:ci:deploy\n5 "),
            AuthorStamp::Changes(vec![
                (3, "alice"),
                (4, "system:serviceaccount:ci:deploy"),
                (5, "")
            ])
        );
        assert_eq!(
            AuthorStamp::parse("1 john smith").latest(),
            Some("john smith")
        );
        for single in [
            "alice",
            "x alice",
            "2 a\n1 b",
            "1 a\n1 b",
            "",
            "1234567890123456789 a",
        ] {
            assert_eq!(
                AuthorStamp::parse(single),
                AuthorStamp::Single(single),
                "{single:?}"
            );
        }
    }

    #[test]
    fn changes_since_the_counted_sequence_and_gaps_are_found() {
        let changes = [(4, "alice"), (5, "bob"), (6, "alice")];
        let all = changes_since(&changes, None);
        assert_eq!(all.users, ["alice", "bob", "alice"]);
        assert!(!all.incomplete);
        let since = changes_since(&changes, Some(4));
        assert_eq!(
            (since.users, since.through),
            (vec!["bob", "alice"], Some(6))
        );
        assert!(!since.incomplete);
        assert!(changes_since(&changes, Some(3)).users.len() == 3);
        assert!(!changes_since(&changes, Some(3)).incomplete);
        assert!(
            changes_since(&changes, Some(2)).incomplete,
            "change 3 was dropped"
        );
        assert!(changes_since(&changes, Some(9)).incomplete, "went back");
        let none = changes_since(&changes, Some(6));
        assert!(none.users.is_empty() && !none.incomplete);
    }
}
