//! Who may attach to a producer, and who may write what it lends: the channel's attach policy,
//! and the refusal a producer sends in the set-up's place.
//!
//! Why a policy and not the socket's file permissions: an abstract socket (`@name`) has none,
//! and a socket pair handed to a child says nothing about who holds the other end. The
//! producer asks the kernel who the peer is (`SO_PEERCRED`) before it sends anything, and
//! lends the pool **read-only** unless the policy lets that peer write: a consumer that only
//! reads cannot corrupt the frames every other consumer reads. The decision needs nothing from
//! the consumer, so `attach` never waits for it (a caller may attach one end of a socket pair
//! and connect the other afterwards, on one thread); a consumer that means to write says so
//! when it connects ([`Lending::Write`]) and is refused there when the set-up is read-only.
//!
//! What read-only means per memory kind (the refusals below say the same):
//! - **shared memory** is lent as an fd reopened read-only: neither `mmap(PROT_WRITE)`,
//!   `mprotect` nor `write` can change it through that fd. Lent to another user, the memory's
//!   file mode is also made unwritable by group and others first, so that user cannot reopen
//!   it writable through `/proc/self/fd`. A process of the producer's own user could (and could
//!   as well write the producer's memory through `/proc/<pid>/mem`): the protection against
//!   one's own user is against mistakes, not malice.
//! - **DMA-BUFs, GPU and CUDA memory** cannot be lent read-only (a DMA-BUF's access is fixed
//!   by its exporter; a driver's memory handle carries none). They are lent to consumers of the
//!   producer's own user, and to others only where the policy lets them write.

use super::setup::Refusal;

/// Whom a rule admits. The producer's own user is named on its own, since it is the default of
/// who may attach and never of who may write.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Peers {
    own_user: bool,
    any: bool,
    uids: Vec<u32>,
    gids: Vec<u32>,
}

impl Peers {
    /// Nobody.
    pub fn none() -> Peers {
        Peers::default()
    }

    /// Processes of the producer's own (effective) user.
    pub fn own_user() -> Peers {
        Peers {
            own_user: true,
            ..Peers::default()
        }
    }

    /// Every process that can reach the socket, of any user.
    pub fn any() -> Peers {
        Peers {
            any: true,
            ..Peers::default()
        }
    }

    /// The same, also admitting processes running as user `uid`.
    pub fn with_uid(mut self, uid: u32) -> Peers {
        self.uids.push(uid);
        self
    }

    /// The same, also admitting processes whose primary group is `gid` (`SO_PEERCRED` tells
    /// the primary group only).
    pub fn with_gid(mut self, gid: u32) -> Peers {
        self.gids.push(gid);
        self
    }

    /// The same, admitting the producer's own user or not.
    pub fn with_own_user(mut self, admit: bool) -> Peers {
        self.own_user = admit;
        self
    }

    /// Everyone this rule or `other` admits.
    pub fn union(mut self, other: &Peers) -> Peers {
        self.own_user |= other.own_user;
        self.any |= other.any;
        self.uids.extend_from_slice(&other.uids);
        self.gids.extend_from_slice(&other.gids);
        self
    }

    /// Whether this rule admits `peer`.
    pub(crate) fn admits(&self, peer: &Peer) -> bool {
        self.any
            || (self.own_user && peer.own_user)
            || peer.uid.is_some_and(|u| self.uids.contains(&u))
            || peer.gid.is_some_and(|g| self.gids.contains(&g))
    }
}

/// A producer's attach policy: who may attach, and who of them may write the pool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Access {
    /// Who may attach (default: the producer's own user).
    pub attach: Peers,
    /// Who may write the pool's buffers, when they ask to (default: nobody; every consumer
    /// reads). A writer must also be admitted by `attach`.
    pub write: Peers,
}

impl Default for Access {
    fn default() -> Access {
        Access {
            attach: Peers::own_user(),
            write: Peers::none(),
        }
    }
}

impl Access {
    /// The same policy, letting `peers` write the pool when they ask to.
    pub fn with_writers(mut self, peers: Peers) -> Access {
        self.write = peers;
        self
    }

    /// The same policy, also admitting `who`, and letting them write where `write` (how the C
    /// and Python `admit` calls build a policy one rule at a time).
    pub fn admitting(mut self, who: Peers, write: bool) -> Access {
        if write {
            self.write = self.write.union(&who);
        }
        self.attach = self.attach.union(&who);
        self
    }

    /// The same policy, letting `peers` attach.
    pub fn with_attach(mut self, peers: Peers) -> Access {
        self.attach = peers;
        self
    }
}

/// Who a consumer is, as the kernel told the producer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Peer {
    /// The peer runs as the producer's effective user.
    pub own_user: bool,
    /// Its user and primary group, where the platform tells them.
    pub uid: Option<u32>,
    pub gid: Option<u32>,
}

/// What a consumer asks of the pool it attaches to.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Lending {
    /// Read the frames only (the default): the pool is lent read-only where its memory allows,
    /// and maps of it refuse writing.
    #[default]
    Read,
    /// Write into the frames as well (a consumer that answers in the buffer itself): granted
    /// only where the producer's [`Access::write`] admits this consumer; connecting is refused
    /// otherwise.
    Write,
}

/// The producer's verdict on `peer`: the lending it gets, or the refusal to send.
/// `read_only_lendable` says whether every buffer of the pool can be lent read-only.
pub(crate) fn verdict(
    access: &Access,
    peer: &Peer,
    read_only_lendable: bool,
) -> std::result::Result<Lending, Refusal> {
    if !access.attach.admits(peer) {
        return Err(Refusal::NotAdmitted);
    }
    if access.write.admits(peer) {
        return Ok(Lending::Write);
    }
    match read_only_lendable || peer.own_user {
        true => Ok(Lending::Read),
        false => Err(Refusal::CannotLendReadOnly),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ME: Peer = Peer {
        own_user: true,
        uid: Some(1000),
        gid: Some(1000),
    };
    const NOBODY: Peer = Peer {
        own_user: false,
        uid: Some(65534),
        gid: Some(65534),
    };

    #[test]
    fn by_default_only_the_own_user_attaches_and_it_reads_only() {
        let access = Access::default();
        assert_eq!(verdict(&access, &ME, true), Ok(Lending::Read));
        assert_eq!(verdict(&access, &NOBODY, true), Err(Refusal::NotAdmitted));
    }

    #[test]
    fn a_widened_policy_admits_by_uid_gid_or_anyone() {
        for attach in [
            Peers::own_user().with_uid(65534),
            Peers::own_user().with_gid(65534),
            Peers::any(),
        ] {
            let access = Access::default().with_attach(attach.clone());
            assert_eq!(
                verdict(&access, &NOBODY, true),
                Ok(Lending::Read),
                "{attach:?}"
            );
        }
        let others_only = Access::default().with_attach(Peers::any().with_own_user(false));
        assert_eq!(verdict(&others_only, &ME, true), Ok(Lending::Read));
        let nobody_else = Access::default().with_attach(Peers::none().with_uid(1));
        assert_eq!(verdict(&nobody_else, &ME, true), Err(Refusal::NotAdmitted));
    }

    #[test]
    fn writers_get_the_pool_writable_only_where_the_policy_says() {
        let access = Access::default().with_writers(Peers::own_user());
        assert_eq!(verdict(&access, &ME, true), Ok(Lending::Write));
        let admitted = access.with_attach(Peers::any());
        assert_eq!(verdict(&admitted, &NOBODY, true), Ok(Lending::Read));
    }

    #[test]
    fn memory_that_cannot_be_lent_read_only_goes_to_another_user_only_as_a_writer() {
        let access = Access::default().with_attach(Peers::any());
        assert_eq!(verdict(&access, &ME, false), Ok(Lending::Read));
        assert_eq!(
            verdict(&access, &NOBODY, false),
            Err(Refusal::CannotLendReadOnly)
        );
        let writers = access.with_writers(Peers::none().with_uid(65534));
        assert_eq!(verdict(&writers, &NOBODY, false), Ok(Lending::Write));
    }

    #[test]
    fn admitting_a_rule_at_a_time_widens_attach_and_write_together() {
        let access = Access::default()
            .admitting(Peers::none().with_uid(65534), false)
            .admitting(Peers::own_user(), true);
        assert_eq!(verdict(&access, &NOBODY, true), Ok(Lending::Read));
        assert_eq!(verdict(&access, &ME, true), Ok(Lending::Write));
    }
}
