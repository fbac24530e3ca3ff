//! What a subscriber remembers of each publisher's sequence numbers, and how a sample's number
//! is judged against it. Sequence numbers travel unauthenticated (anyone on the key can send a
//! sample naming a real publisher's id), so no single sample may move the state where genuine
//! frames can no longer pass: a jump too far either way starts a new sequence, and only a
//! sample a little behind the last one is dropped as stale.

use std::collections::HashMap;

use uuid::Uuid;

/// How far ahead of the last frame a sample may be and count the frames between as missed: a
/// publisher at 1000 frames a second losing every frame for 17 minutes. Further is a new
/// sequence, not a gap (a forged number cannot add more than this to the gaps counted).
pub(crate) const MAX_GAP: u64 = 1 << 20;

/// How far behind the last frame a sample may be and be stale (a duplicate or a replay of a
/// recent frame, dropped). Further behind is a new sequence: so a forged sample far ahead of
/// a publisher silences at most this many of its genuine frames before they pass again.
pub(crate) const STALE_WINDOW: u64 = 64;

/// Publishers whose last frame is remembered; past it the one heard from longest ago is
/// forgotten (its next frame starts a new sequence), so forged ids cannot grow the table.
pub(crate) const MAX_PUBLISHERS: usize = 1024;

/// What to do with a sample.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The next frame, after `gap` missed ones.
    Next { gap: u64 },
    /// The first frame of this publisher, or of a new sequence after a jump.
    New,
    /// Not newer than the last frame and close behind it: dropped.
    Stale { last: u64 },
}

/// The last sequence number seen from each publisher.
#[derive(Debug, Default)]
pub(crate) struct Sequences {
    /// Per publisher: its last number and when it was heard from (a count of accepted frames).
    last: HashMap<Uuid, (u64, u64)>,
    clock: u64,
}

impl Sequences {
    /// Judges frame `seq` of `publisher` and, unless it is stale, records it.
    pub(crate) fn accept(&mut self, publisher: Uuid, seq: u64) -> Verdict {
        let verdict = match self.last.get(&publisher) {
            None => Verdict::New,
            Some(&(last, _)) => judge(last, seq),
        };
        if !matches!(verdict, Verdict::Stale { .. }) {
            self.record(publisher, seq);
        }
        verdict
    }

    fn record(&mut self, publisher: Uuid, seq: u64) {
        self.clock += 1;
        if self.last.len() >= MAX_PUBLISHERS && !self.last.contains_key(&publisher) {
            let oldest = self
                .last
                .iter()
                .min_by_key(|(_, (_, at))| *at)
                .map(|(id, _)| *id);
            if let Some(id) = oldest {
                self.last.remove(&id);
            }
        }
        self.last.insert(publisher, (seq, self.clock));
    }
}

fn judge(last: u64, seq: u64) -> Verdict {
    if seq > last {
        match seq - last {
            d if d <= MAX_GAP => Verdict::Next { gap: d - 1 },
            _ => Verdict::New,
        }
    } else if last - seq < STALE_WINDOW {
        Verdict::Stale { last }
    } else {
        Verdict::New
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_in_order_pass_and_missed_ones_are_the_gap() {
        let (mut s, id) = (Sequences::default(), Uuid::new_v4());
        assert_eq!(s.accept(id, 1), Verdict::New);
        assert_eq!(s.accept(id, 2), Verdict::Next { gap: 0 });
        assert_eq!(s.accept(id, 6), Verdict::Next { gap: 3 });
        assert_eq!(s.accept(id, 6), Verdict::Stale { last: 6 });
        assert_eq!(s.accept(id, 3), Verdict::Stale { last: 6 });
    }

    #[test]
    fn one_forged_sample_far_ahead_does_not_silence_the_publisher() {
        let (mut s, id) = (Sequences::default(), Uuid::new_v4());
        assert_eq!(s.accept(id, 10), Verdict::New);
        assert_eq!(s.accept(id, u64::MAX - 1), Verdict::New); // forged: a new sequence
        assert_eq!(s.accept(id, 11), Verdict::New); // the genuine one passes at once
        assert_eq!(s.accept(id, 12), Verdict::Next { gap: 0 });
    }

    #[test]
    fn a_forged_sample_a_little_ahead_silences_at_most_the_stale_window() {
        let (mut s, id) = (Sequences::default(), Uuid::new_v4());
        s.accept(id, 100);
        s.accept(id, 100 + STALE_WINDOW); // forged, within reach of a gap
        let dropped = (101..100 + 2 * STALE_WINDOW)
            .filter(|&seq| matches!(s.accept(id, seq), Verdict::Stale { .. }))
            .count() as u64;
        assert!(dropped <= STALE_WINDOW, "{dropped} genuine frames dropped");
    }

    #[test]
    fn a_jump_past_the_largest_gap_counts_no_gap() {
        let (mut s, id) = (Sequences::default(), Uuid::new_v4());
        s.accept(id, 1);
        assert_eq!(
            s.accept(id, 1 + MAX_GAP),
            Verdict::Next { gap: MAX_GAP - 1 }
        );
        assert_eq!(s.accept(id, 2 + 2 * MAX_GAP), Verdict::New);
    }

    #[test]
    fn forged_publisher_ids_cannot_grow_the_table_past_its_bound() {
        let (mut s, kept) = (Sequences::default(), Uuid::new_v4());
        s.accept(kept, 1);
        for seq in 2..2 + 3 * MAX_PUBLISHERS as u64 {
            s.accept(Uuid::new_v4(), 1);
            s.accept(kept, seq); // heard from often: never the oldest
        }
        assert_eq!(s.last.len(), MAX_PUBLISHERS);
        assert!(s.last.contains_key(&kept));
    }

    proptest::proptest! {
        #[test]
        fn any_numbers_from_any_state_are_judged_without_overflow(
            last in proptest::prelude::any::<u64>(),
            seq in proptest::prelude::any::<u64>(),
        ) {
            match judge(last, seq) {
                Verdict::Next { gap } => proptest::prop_assert!(gap < MAX_GAP && seq > last),
                Verdict::Stale { .. } => proptest::prop_assert!(seq <= last),
                Verdict::New => {}
            }
        }
    }
}
