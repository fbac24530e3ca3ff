//! The receiving side of a channel: the pool as this process imported it, the frames it
//! hands out, and the way their buffers go back.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::access::Lending;
use super::os::{self, Conn, Link, PeerFence};
use super::ring::{Entry, Ring};
use super::setup::Refusal;
use super::{FrameMeta, Woken, PAYLOAD_BYTES, SPIN};
use crate::gpu::GPU_WAIT;
use crate::handoff::{self, MID_MESSAGE_TIMEOUT};
use crate::{Error, Result, TensorDyn};

/// The least a timed receive gives a frame's GPU completion once the frame is there, however
/// little of its timeout is left: a frame published just before the deadline with its copy
/// still running is not refused for that (a GPU copy of a 4K frame takes about a millisecond).
const COMPLETION_GRACE: Duration = Duration::from_millis(5);
/// How often a busy-polling receive looks at the socket for a producer that died.
const SPIN_LIVENESS: Duration = Duration::from_millis(1);

/// How long [`Consumer::connect`] waits for a whole set-up where its caller names no bound
/// (the C ABI's `hwt_consumer_connect`): a producer on the same machine sends its set-up and
/// pool in milliseconds, and one silent for this long has hung.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How a receive waits for a frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wait {
    /// Spin on the ring, never sleeping (lowest latency; a core busy).
    Spin,
    /// Spin briefly, then sleep until a frame comes.
    Block,
    /// As `Block`, for at most this long (then `Error::Timeout`).
    For(Duration),
    /// Sleep at once until a frame comes, for at most this long (then `Error::Timeout`),
    /// without the spin: for frames that come far apart (a video source at 30-200 fps), where
    /// the spin (20 us) finds nothing and only burns CPU on every frame.
    Sleep(Duration),
}

/// What a consumer shares with the frames it handed out: the way back.
#[derive(Debug)]
struct Back {
    ring: Arc<Ring>,
    /// The consumer's connection (a second handle to it): hand-backs wake the producer on it.
    socket: Conn,
    /// Which buffers this consumer holds (a replayed id from the producer is refused); also
    /// serialises hand-backs from frames dropped on several threads.
    holds: Mutex<Vec<bool>>,
}

impl Back {
    fn hand_back_or_log(&self, slot: u32) {
        if let Err(e) = self.hand_back(slot) {
            log::warn!("hwtensor: handing a frame back failed: {e}");
        }
    }

    /// Which buffers this consumer holds, locked.
    fn holds(&self) -> Result<std::sync::MutexGuard<'_, Vec<bool>>> {
        self.holds
            .lock()
            .map_err(|_| Error::InvalidOperation("a hand-back panicked earlier".into()))
    }

    fn hand_back(&self, slot: u32) -> Result<()> {
        let mut holds = self.holds()?;
        if let Some(h) = holds.get_mut(slot as usize) {
            *h = false;
        }
        self.ring.push_back(slot)?;
        if self.ring.peer_sleeps(false) {
            os::wake(&self.socket);
        }
        Ok(())
    }
}

/// The receiving side of a channel. Dropping it shuts the connection down (the socket it was
/// given and every duplicate of it): the producer sees it leave even while frames are held.
pub struct Consumer {
    conn: Conn,
    ring: Arc<Ring>,
    pool: Vec<TensorDyn>,
    fence: Option<PeerFence>,
    back: Arc<Back>,
    lending: Lending,
    info: Vec<u8>,
}

/// A received frame: the pool's buffer and its metadata. Dropping it hands the buffer back.
#[derive(Debug)]
pub struct Frame {
    tensor: TensorDyn,
    meta: FrameMeta,
    slot: u32,
    back: Arc<Back>,
}

impl Frame {
    /// The frame's tensor (the consumer's import of the pool buffer).
    pub fn tensor(&self) -> &TensorDyn {
        &self.tensor
    }
    /// The frame's metadata.
    pub fn meta(&self) -> &FrameMeta {
        &self.meta
    }
    /// The buffer's index in the pool.
    pub fn slot(&self) -> usize {
        self.slot as usize
    }
}

impl Drop for Frame {
    fn drop(&mut self) {
        // GPU work of ours still reading the buffer must end before the producer rewrites it:
        // the buffer goes back once it has, from the completion waiter's thread, and this
        // thread never waits. (A CPU wait here took ~10 ms a frame on NVIDIA, a blocked wait
        // on a CUDA-signalled value waking late; issue #27.) Work that never ends keeps the
        // buffer, which costs the producer a bounded acquire, never a hang.
        let (back, slot) = (self.back.clone(), self.slot);
        os::after_gpu_use(&self.tensor, move || back.hand_back_or_log(slot));
    }
}

impl Drop for Consumer {
    fn drop(&mut self) {
        // Frames still held keep a handle to the socket for their hand-backs: shutting it
        // down tells the producer now that this consumer is gone (their later hand-backs go
        // nowhere, harmlessly), as closing the last handle would.
        os::leave(&self.conn);
    }
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("pool", &self.pool.len())
            .field("gpu_fence", &self.fence.is_some())
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// Attaches to a producer on a connected socket (a named pipe on Windows): receives the
    /// set-up and imports the pool,
    /// all of it within `timeout` (a producer that is silent, or stalls mid-message, is
    /// `Error::Timeout` or `Error::Handoff` by then, whatever the socket's own timeouts and
    /// blocking mode; [`CONNECT_TIMEOUT`] is a sensible bound). GPU buffers are accepted from a
    /// producer of this user (as `handoff::recv` does).
    ///
    /// The pool is read-only here (its maps refuse writing; shared memory is lent read-only by
    /// the producer itself): [`Consumer::connect_with`] asks to write. A producer whose attach
    /// policy does not admit this process is `Error::NotPermitted`.
    pub fn connect(stream: Link, timeout: Duration) -> Result<Consumer> {
        Consumer::connect_with(stream, timeout, Lending::Read)
    }

    /// As [`Consumer::connect`], asking for `lending`: [`Lending::Write`] is refused
    /// (`Error::NotPermitted`) where the producer lends the pool read-only.
    pub fn connect_with(stream: Link, timeout: Duration, lending: Lending) -> Result<Consumer> {
        let deadline = crate::time::deadline_after(timeout);
        let (s, fence, conn) = os::recv_setup(stream, deadline)?;
        if lending == Lending::Write && s.read_only {
            os::leave(&conn);
            return Err(Refusal::WriteNotGranted.to_error());
        }
        let ring = Arc::new(Ring::open(s.block, s.capacity)?);
        let pool = (0..s.slots)
            .map(|_| handoff::recv_by(os::link(&conn), deadline).map(|t| as_lent(t, lending)))
            .collect::<Result<Vec<_>>>()?;
        let info = match s.has_info {
            true => super::info::recv(os::link(&conn), deadline)?,
            false => Vec::new(),
        };
        let socket = os::duplicate(&conn)?;
        let back = Arc::new(Back {
            ring: ring.clone(),
            socket,
            holds: Mutex::new(vec![false; pool.len()]),
        });
        Ok(Consumer {
            conn,
            ring,
            pool,
            fence,
            back,
            lending,
            info,
        })
    }

    /// The producer's description of its stream (what [`super::Producer::set_stream_info`]
    /// set when this consumer attached); empty where it set none.
    pub fn stream_info(&self) -> &[u8] {
        &self.info
    }

    /// How this consumer holds the pool: read-only, or writable.
    pub fn lending(&self) -> Lending {
        self.lending
    }

    /// The pool's buffers, as this process imported them.
    pub fn pool(&self) -> &[TensorDyn] {
        &self.pool
    }

    /// The next frame, waiting as `wait` says. A producer that left is `Error::PeerLeft`; a
    /// frame naming a buffer out of the pool, or one this consumer still holds, is an error.
    pub fn recv(&mut self, wait: Wait) -> Result<Frame> {
        let started = Instant::now();
        let deadline = match wait {
            Wait::For(d) | Wait::Sleep(d) => Some(crate::time::deadline_from(started, d)),
            _ => None,
        };
        let spins = match wait {
            Wait::Spin => Duration::MAX,
            Wait::Sleep(_) => Duration::ZERO,
            Wait::Block | Wait::For(_) => SPIN,
        };
        let mut checked = started;
        loop {
            if let Some(e) = self.ring.peek_frame()? {
                // Buffers added since the last frame were sent before the first frame that
                // names one, in order: take each up to the one this frame names (one past the
                // ring can never come: `frame` refuses it at once).
                let room = self.ring.capacity() as usize;
                while (self.pool.len()..room).contains(&(e.slot as usize)) {
                    self.take_addition(deadline)?;
                }
                self.ring.skip_frame();
                return self.frame(e, deadline);
            }
            let now = Instant::now();
            // Checked on every turn: a producer that keeps waking us with no frame is bounded.
            if deadline.is_some_and(|d| now >= d) {
                return Err(no_frame());
            }
            if now.saturating_duration_since(started) < spins {
                if now >= checked + SPIN_LIVENESS {
                    self.check_producer()?;
                    checked = now;
                }
                std::thread::yield_now(); // see `SPIN`
                continue;
            }
            self.sleep(deadline)?;
        }
    }

    /// The frame of entry `e`, once its GPU completion is reached: waited for until the
    /// receive's deadline (at least [`COMPLETION_GRACE`]), else at most `GPU_WAIT`. A frame whose
    /// completion does not come is an error, and its buffer goes back.
    fn frame(&self, e: Entry, deadline: Option<Instant>) -> Result<Frame> {
        let i = e.slot as usize;
        let tensor = self.pool.get(i).cloned().ok_or_else(|| {
            Error::Handoff(format!(
                "the producer sent buffer {i} of a pool of {}",
                self.pool.len()
            ))
        })?;
        {
            let mut holds = self.back.holds()?;
            if std::mem::replace(&mut holds[i], true) {
                return Err(Error::Handoff(format!(
                    "the producer sent buffer {i} again while this consumer holds it"
                )));
            }
        }
        let payload_len = u8::try_from(e.payload_len)
            .ok()
            .filter(|&n| usize::from(n) <= PAYLOAD_BYTES)
            .unwrap_or(0);
        let frame = Frame {
            tensor,
            meta: FrameMeta {
                seq: e.seq,
                timestamp_ns: e.timestamp_ns,
                payload: e.payload,
                payload_len,
            },
            slot: e.slot,
            back: self.back.clone(),
        };
        if e.completion > 0 {
            let fence = self.fence.as_ref().ok_or_else(|| {
                Error::Handoff(
                    "a frame with a GPU completion, but the producer sent no fence".into(),
                )
            })?;
            let bound = deadline.map_or(GPU_WAIT, |d| {
                d.saturating_duration_since(Instant::now())
                    .clamp(COMPLETION_GRACE, GPU_WAIT)
            });
            os::wait_fence(fence, e.completion, bound)?;
        }
        Ok(frame)
    }

    /// Sleeps until the producer publishes, adds a buffer, leaves, or the deadline passes.
    fn sleep(&mut self, deadline: Option<Instant>) -> Result<()> {
        self.ring.going_to_sleep(true);
        let woken = if self.ring.frame_ready() {
            Woken::Event
        } else {
            os::wait(&[&self.conn], deadline)?
        };
        self.ring.awake(true);
        match woken {
            Woken::Event => Ok(()),
            Woken::Message(_) => self.take_addition(deadline),
            Woken::Left(_) => self.producer_left(),
            Woken::Timeout => Err(no_frame()),
        }
    }

    /// Receives a buffer the producer added to the pool ([`super::Producer::add`]): it was sent
    /// whole before any frame names it, so it is waited for only as long as a message broken
    /// off mid-way, and never past the receive's `deadline` (then `Error::Timeout`, the frame
    /// that named it left in the ring). Anything but a buffer there (a hostile or broken
    /// producer) is an error, not a wait; so is a pool past the ring the producer made.
    fn take_addition(&mut self, deadline: Option<Instant>) -> Result<()> {
        let room = self.ring.capacity() as usize;
        if self.pool.len() >= room {
            return Err(Error::Handoff(format!(
                "the producer added a buffer past the {room} its ring holds"
            )));
        }
        let broken_off = crate::time::deadline_after(MID_MESSAGE_TIMEOUT);
        let by = deadline.map_or(broken_off, |d| d.min(broken_off));
        let t = os::recv_addition(&self.conn, by).map_err(|e| match e {
            Error::Timeout(_) if deadline.is_some_and(|d| d <= broken_off) => no_frame(),
            e => Error::Handoff(format!("a buffer the producer added: {e}")),
        })?;
        self.back.holds()?.push(false);
        self.pool.push(as_lent(t, self.lending));
        Ok(())
    }

    /// Errs when the producer's socket hung up.
    fn check_producer(&self) -> Result<()> {
        match os::wait(&[&self.conn], Some(Instant::now()))? {
            Woken::Left(_) => self.producer_left(),
            _ => Ok(()),
        }
    }

    fn producer_left(&self) -> Result<()> {
        if self.ring.frame_ready() {
            return Ok(()); // frames it sent before leaving are still delivered
        }
        Err(Error::PeerLeft(
            "the producer left (its socket hung up); frames received earlier stay valid".into(),
        ))
    }
}

/// `t` as a consumer that asked for `lending` holds it: one that asked to read only gets maps
/// that refuse writing, even where the producer lent the buffer writable.
fn as_lent(t: TensorDyn, lending: Lending) -> TensorDyn {
    match lending {
        Lending::Read => t.read_only(),
        Lending::Write => t,
    }
}

fn no_frame() -> Error {
    Error::Timeout("no frame within the receive's timeout".into())
}

#[cfg(all(test, target_os = "linux"))]
impl Consumer {
    /// This consumer's ring, for a test to play a hostile consumer on.
    pub(super) fn ring(&self) -> &Ring {
        &self.ring
    }

    /// The consumer's end of its socket, for a test to misbehave on.
    pub(super) fn socket(&self) -> Link {
        self.conn.try_clone().unwrap()
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::super::test_support::{buffer, connected, connected_with_room, while_flooded};
    use super::super::Producer;
    use super::*;

    #[test]
    fn a_buffer_the_producer_adds_after_attach_comes_with_the_first_frame_that_names_it() {
        let (mut producer, mut consumer) = connected_with_room(4);
        let added = producer.add(buffer()).unwrap();
        assert_eq!(added.index(), 3);
        producer
            .tensor(added)
            .as_tensor::<u8>()
            .unwrap()
            .map_write()
            .unwrap()
            .fill(9);
        producer
            .acquire_slot(added, Duration::from_secs(1))
            .unwrap();
        producer.send(added, FrameMeta::new(1, 0)).unwrap();
        let frame = consumer.recv(Wait::For(Duration::from_secs(5))).unwrap();
        assert_eq!((frame.slot(), consumer.pool().len()), (3, 4));
        assert!(frame
            .tensor()
            .as_tensor::<u8>()
            .unwrap()
            .map_read()
            .unwrap()
            .iter()
            .all(|&b| b == 9));
        assert!(producer.is_held(added));
        drop(frame);
        // The added buffer comes back like any other, and is acquired only by name.
        assert!(!producer.is_held(added));
        let free: Vec<_> = (0..3)
            .map(|_| producer.acquire(Duration::from_secs(1)).unwrap().index())
            .collect();
        assert_eq!(free, [0, 1, 2]);
        let none = producer.acquire(Duration::from_millis(50));
        assert!(matches!(none, Err(Error::Timeout(_))), "{none:?}");
        producer
            .acquire_slot(added, Duration::from_secs(1))
            .unwrap();
    }

    #[test]
    fn several_additions_then_a_frame_in_the_last_reach_the_consumer_in_every_wait_mode() {
        let waits = [
            Wait::Spin,
            Wait::Block,
            Wait::For(Duration::from_secs(5)),
            Wait::Sleep(Duration::from_secs(5)),
        ];
        for added in [2usize, 3] {
            for wait in waits {
                let (mut producer, mut consumer) = connected_with_room(3 + added);
                let slots: Vec<_> = (0..added)
                    .map(|_| producer.add(buffer()).unwrap())
                    .collect();
                let last = *slots.last().unwrap();
                producer.acquire_slot(last, Duration::from_secs(1)).unwrap();
                producer.send(last, FrameMeta::new(9, 0)).unwrap();
                let frame = consumer.recv(wait).unwrap();
                assert_eq!(
                    (frame.slot(), frame.meta().seq),
                    (last.index(), 9),
                    "{wait:?}"
                );
                assert_eq!(consumer.pool().len(), 3 + added, "{wait:?}");
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]
        /// The growth fuzz target's entry (additions, hostile frames, broken hand-offs,
        /// wake-ups, hand-backs) on random sequences: no panic, every receive by its deadline.
        #[test]
        fn any_sequence_of_honest_and_hostile_growth_is_survived(
            ops in proptest::collection::vec(proptest::prelude::any::<u8>(), 1..64),
        ) {
            super::super::fuzzing::growth(&ops);
        }
    }

    #[test]
    fn the_growth_fuzz_entry_adds_sends_and_receives_for_real() {
        // add, add, a frame in slot 3, a receive that keeps it (taking both additions), a
        // frame naming slot 9 (refused at once), a broken hand-off, and receives that wait
        // for the rest of it until their deadline: the entry really reaches its receives.
        let started = Instant::now();
        super::super::fuzzing::growth(&[6, 0, 0, 0, 0, 1, 3, 5, 2, 2, 9, 3, 7, 5, 1, 5, 1, 5, 1]);
        assert!(
            started.elapsed() >= Duration::from_millis(2),
            "no receive waited"
        );
    }

    #[test]
    fn a_consumer_receives_the_stream_description_set_before_it_attached() {
        let mut producer = Producer::new(vec![buffer(), buffer()]).unwrap();
        let caps = b"video/x-raw, format=(string)BGRx, framerate=(fraction)30/1";
        producer.set_stream_info(caps).unwrap();
        let too_long = vec![b'x'; super::super::MAX_STREAM_INFO + 1];
        assert!(producer.set_stream_info(&too_long).is_err());
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        producer.attach(a).unwrap();
        let consumer = Consumer::connect(b, Duration::from_secs(5)).unwrap();
        assert_eq!(consumer.stream_info(), caps);
        producer.set_stream_info(b"").unwrap();
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        producer.attach(a).unwrap();
        assert!(Consumer::connect(b, Duration::from_secs(5))
            .unwrap()
            .stream_info()
            .is_empty());
    }

    #[test]
    fn a_stream_description_that_is_no_byte_list_is_refused_at_connect() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let ring = Ring::create(2).unwrap();
        let flags = super::super::setup::Flags {
            info: true,
            ..Default::default()
        };
        let msg = super::super::setup::encode_with(1, ring.capacity(), flags);
        let fd = ring.block().share().unwrap();
        super::super::os::send_set_up_message(&a, &msg, &[std::os::fd::AsFd::as_fd(&fd)]).unwrap();
        handoff::send_as(&a, &buffer(), crate::blob::Transport::Reference).unwrap();
        let floats = crate::Tensor::<f32>::new(&[4], None).unwrap();
        handoff::send_as(&a, &floats.into(), crate::blob::Transport::Inline).unwrap();
        let err = Consumer::connect(b, Duration::from_secs(5)).unwrap_err();
        assert!(err.to_string().contains("stream description"), "{err}");
    }

    #[test]
    fn a_receive_waiting_for_an_addition_that_never_comes_ends_by_its_deadline() {
        for wait in [
            Wait::For(Duration::from_millis(300)),
            Wait::Sleep(Duration::from_millis(300)),
        ] {
            let (producer, mut consumer) = connected_with_room(4);
            let unsent = Entry {
                slot: 3,
                ..Entry::default()
            };
            producer.ring_of(0).push_frame(unsent).unwrap();
            let started = Instant::now();
            let got = consumer.recv(wait);
            let took = started.elapsed();
            assert!(matches!(got, Err(Error::Timeout(_))), "{wait:?}: {got:?}");
            assert!(took < Duration::from_millis(350), "{wait:?} took {took:?}");
        }
    }

    #[test]
    fn a_timeout_past_the_clocks_range_waits_and_still_sees_the_producer_leave() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let connecting = std::thread::spawn(move || Consumer::connect(b, Duration::MAX));
        let mut producer = Producer::new(vec![buffer(), buffer()]).unwrap();
        producer.attach(a).unwrap();
        let mut consumer = connecting.join().unwrap().unwrap();
        let slot = producer.acquire(Duration::MAX).unwrap();
        producer.send(slot, FrameMeta::new(1, 0)).unwrap();
        for wait in [Wait::For(Duration::MAX), Wait::Sleep(Duration::MAX)] {
            drop(consumer.recv(wait).unwrap());
            let slot = producer.acquire(Duration::MAX).unwrap();
            producer.send(slot, FrameMeta::new(2, 0)).unwrap();
        }
        let leaving = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            drop(producer);
        });
        let _held = consumer.recv(Wait::For(Duration::MAX)).unwrap();
        let got = consumer.recv(Wait::For(Duration::MAX));
        assert!(matches!(got, Err(Error::PeerLeft(_))), "{got:?}");
        leaving.join().unwrap();
    }

    #[test]
    fn a_sleeping_consumer_takes_an_added_buffer_before_any_frame_names_it() {
        let (mut producer, mut consumer) = connected_with_room(4);
        producer.add(buffer()).unwrap();
        let got = consumer.recv(Wait::Sleep(Duration::from_millis(100)));
        assert!(matches!(got, Err(Error::Timeout(_))), "{got:?}");
        assert_eq!(consumer.pool().len(), 4);
    }

    #[test]
    fn a_frame_naming_an_added_buffer_that_never_came_is_an_error() {
        let (producer, mut consumer) = connected_with_room(4);
        let unsent = Entry {
            slot: 3,
            ..Entry::default()
        };
        producer.ring_of(0).push_frame(unsent).unwrap();
        let err = consumer.recv(Wait::Block).unwrap_err();
        assert!(
            err.to_string().contains("a buffer the producer added"),
            "{err}"
        );
    }

    #[test]
    fn bytes_that_are_neither_wake_ups_nor_a_buffer_end_a_receive_with_an_error() {
        let (producer, mut consumer) = connected();
        let junk = [7u8; 64];
        rustix::net::send(
            producer.socket_of(0),
            &junk,
            rustix::net::SendFlags::empty(),
        )
        .unwrap();
        let started = Instant::now();
        let err = consumer
            .recv(Wait::For(Duration::from_secs(5)))
            .unwrap_err();
        assert!(matches!(err, Error::Handoff(_)), "{err:?}");
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "not waited out: {err}"
        );
    }

    #[test]
    fn a_buffer_past_the_ring_the_producer_made_is_refused() {
        let (mut producer, mut consumer) = connected_with_room(4);
        producer.add(buffer()).unwrap();
        let frame = producer.ring_of(0).push_frame(Entry {
            slot: 3,
            ..Entry::default()
        });
        frame.unwrap();
        // The consumer takes the fourth buffer: its pool is now its whole ring.
        drop(consumer.recv(Wait::Block).unwrap());
        // A hostile producer sends a fifth buffer for a four-entry ring: a sleeping consumer
        // refuses it as it comes.
        let socket = producer.socket_of(0);
        handoff::send_as(&socket, &buffer(), crate::blob::Transport::Reference).unwrap();
        let err = consumer
            .recv(Wait::Sleep(Duration::from_secs(5)))
            .unwrap_err();
        assert!(
            err.to_string().contains("past the 4 its ring holds"),
            "{err}"
        );
        // And a frame naming that fifth buffer is refused at once, never waited for.
        let beyond = Entry {
            slot: 4,
            ..Entry::default()
        };
        producer.ring_of(0).push_frame(beyond).unwrap();
        let started = Instant::now();
        let err = consumer.recv(Wait::Block).unwrap_err();
        assert!(err.to_string().contains("buffer 4 of a pool of 4"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_frame_naming_a_buffer_outside_the_pool_is_an_error() {
        let (producer, mut consumer) = connected();
        let bogus = Entry {
            slot: 7,
            ..Entry::default()
        };
        producer.ring_of(0).push_frame(bogus).unwrap();
        let err = consumer.recv(Wait::Block).unwrap_err();
        assert!(err.to_string().contains("buffer 7 of a pool of 3"), "{err}");
    }

    #[test]
    fn a_frame_replaying_a_buffer_the_consumer_holds_is_an_error() {
        let (mut producer, mut consumer) = connected();
        let slot = producer.acquire(Duration::from_secs(1)).unwrap();
        producer.send(slot, FrameMeta::new(0, 0)).unwrap();
        let _held = consumer.recv(Wait::Block).unwrap();
        let replay = Entry {
            slot: slot.index() as u32,
            ..Entry::default()
        };
        producer.ring_of(0).push_frame(replay).unwrap();
        let err = consumer.recv(Wait::Block).unwrap_err();
        assert!(err.to_string().contains("again while"), "{err}");
    }

    #[test]
    fn a_producer_that_keeps_waking_without_frames_cannot_hold_a_timed_receive_past_its_deadline() {
        let (producer, mut consumer) = connected();
        let (got, took) = while_flooded(producer.socket_of(0), || {
            consumer.recv(Wait::For(Duration::from_millis(200)))
        });
        assert!(matches!(got, Err(Error::Timeout(_))), "{got:?}");
        assert!(took < Duration::from_secs(5), "returned after {took:?}");
    }

    #[test]
    fn a_hand_back_to_a_producer_that_never_reads_its_socket_does_not_block() {
        let (mut producer, mut consumer) = connected();
        // The producer says it sleeps (so every hand-back sends a wake-up) and reads nothing:
        // the consumer's end of the socket, blocking, is full.
        producer.ring_of(0).going_to_sleep(false);
        let full = rustix::net::SendFlags::DONTWAIT;
        while rustix::net::send(&consumer.conn, &[0; 4096], full).is_ok() {}
        for seq in 0..3 {
            let slot = producer.acquire(Duration::from_secs(1)).unwrap();
            producer.send(slot, FrameMeta::new(seq, 0)).unwrap();
            drop(consumer.recv(Wait::Block).unwrap()); // hands back: returns
        }
    }

    #[test]
    fn a_dropped_producer_is_seen_leaving_though_its_caller_keeps_the_socket() {
        let (producer, mut consumer) = connected();
        let kept = producer.socket_of(0); // the caller's own handle to the same socket
        drop(producer);
        let err = consumer
            .recv(Wait::For(Duration::from_secs(5)))
            .unwrap_err();
        assert!(matches!(err, Error::PeerLeft(_)), "{err:?}");
        drop(kept);
    }

    #[test]
    fn a_producer_silent_after_its_set_up_is_a_connect_timeout() {
        let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
        let ring = Ring::create(3).unwrap();
        let msg = super::super::setup::encode(3, ring.capacity(), false, false);
        let fd = ring.block().share().unwrap();
        super::super::os::send_set_up_message(&a, &msg, &[std::os::fd::AsFd::as_fd(&fd)]).unwrap();
        let started = Instant::now();
        let got = Consumer::connect(b, Duration::from_millis(200));
        assert!(matches!(got, Err(Error::Timeout(_))), "{got:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn a_sleeping_receive_is_woken_by_a_frame_sent_after_it_slept_and_times_out_without_one() {
        let (mut producer, mut consumer) = connected();
        let sender = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            let slot = producer.acquire(Duration::from_secs(1)).unwrap();
            producer.send(slot, FrameMeta::new(7, 0)).unwrap();
            producer
        });
        let frame = consumer.recv(Wait::Sleep(Duration::from_secs(5))).unwrap();
        assert_eq!(frame.meta().seq, 7);
        let _producer = sender.join().unwrap();
        let started = Instant::now();
        let got = consumer.recv(Wait::Sleep(Duration::from_millis(100)));
        assert!(matches!(got, Err(Error::Timeout(_))), "{got:?}");
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
