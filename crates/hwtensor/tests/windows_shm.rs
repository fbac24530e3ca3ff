//! Shared memory on Windows: tensors over a pagefile-backed section (run under Wine in the
//! test command's Windows leg).

#![cfg(windows)]

mod common;

use hwtensor::{BufferIdentity, CpuAccess, ImageSpec, PixelFormat, Tensor, TensorMemory};

use common::handles;

#[test]
fn a_shm_tensor_is_a_section_of_this_process_that_maps_reads_and_writes() {
    assert!(
        TensorMemory::Shm.is_available(),
        "{:?}",
        TensorMemory::Shm.unavailable_reason()
    );
    let t = Tensor::<u16>::new(&[480, 640], Some(TensorMemory::Shm)).unwrap();
    assert_eq!(t.memory(), TensorMemory::Shm);
    assert!(
        t.to_vec().unwrap().iter().all(|&v| v == 0),
        "a new section is zeroed"
    );
    t.map_write()
        .unwrap()
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = i as u16);
    let clone = t.clone();
    assert_eq!(clone.identity(), t.identity());
    assert!(clone
        .map_read()
        .unwrap()
        .iter()
        .enumerate()
        .all(|(i, &v)| v == i as u16));
    match t.identity() {
        BufferIdentity::Section { pid, .. } => assert_eq!(pid, std::process::id()),
        other => panic!("a section's identity, not {other:?}"),
    }
    let other = Tensor::<u16>::new(&[480, 640], Some(TensorMemory::Shm)).unwrap();
    assert_ne!(other.identity(), t.identity());
}

#[test]
fn images_and_empty_tensors_live_in_sections_too() {
    let image = Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Nv12, 1280, 720),
        Some(TensorMemory::Shm),
        CpuAccess::ReadWrite,
    )
    .unwrap();
    assert_eq!(image.memory(), TensorMemory::Shm);
    image.map_write().unwrap().fill(7);
    assert!(image.map_read().unwrap().iter().all(|&v| v == 7));
    let empty = Tensor::<f32>::new(&[0, 4], Some(TensorMemory::Shm)).unwrap();
    assert!(empty.is_empty());
    assert!(empty.to_vec().unwrap().is_empty());
}

#[test]
fn a_plain_tensor_chooses_shared_memory_when_not_told() {
    let t = Tensor::<u8>::new(&[4096], None).unwrap();
    assert_eq!(t.memory(), TensorMemory::Shm);
}

#[test]
fn sections_give_back_their_handles_when_their_last_tensor_goes() {
    let warm = Tensor::<u8>::new(&[1 << 20], Some(TensorMemory::Shm)).unwrap();
    drop(warm);
    let before = handles();
    for _ in 0..200 {
        let t = Tensor::<u8>::new(&[1 << 20], Some(TensorMemory::Shm)).unwrap();
        t.map_write().unwrap()[0] = 1;
        drop(t.clone());
    }
    let after = handles();
    assert!(
        after <= before + 2,
        "{before} handles before 200 sections came and went, {after} after"
    );
}

#[test]
fn dma_buf_memory_is_refused_by_name_with_what_to_use() {
    let err = Tensor::<u8>::new(&[16], Some(TensorMemory::DmaBuf)).unwrap_err();
    assert!(err.to_string().contains("shm"), "{err}");
}

/// The environment variable that makes this binary the child of the two-process test: the
/// pipe's name.
const CHILD: &str = "HWTENSOR_WINDOWS_SHM_CHILD";
const TWO_PROCESSES: &str = "a_section_crosses_to_a_child_process_that_answers_in_the_same_memory";
const WAIT: std::time::Duration = std::time::Duration::from_secs(20);

/// The child: takes the section, checks it, writes its answer into the same memory and says so.
fn child(name: &str) {
    use hwtensor::handoff::{recv, send_as, Pipe};
    let pipe = Pipe::connect(name, WAIT).unwrap();
    let t = recv(&pipe, WAIT).unwrap().into_tensor::<u32>().unwrap();
    assert_eq!(t.memory(), TensorMemory::Shm);
    match t.identity() {
        BufferIdentity::Section { pid, .. } => assert_eq!(pid, pipe.peer_pid().unwrap()),
        other => panic!("a section's identity, not {other:?}"),
    }
    assert!(t
        .map_read()
        .unwrap()
        .iter()
        .enumerate()
        .all(|(i, &v)| v == i as u32));
    t.map_write().unwrap().iter_mut().for_each(|v| *v = !*v);
    let done = Tensor::<u8>::new(&[1], Some(TensorMemory::Mem)).unwrap();
    send_as(&pipe, &done.into(), hwtensor::blob::Transport::Inline).unwrap();
}

#[test]
fn a_section_crosses_to_a_child_process_that_answers_in_the_same_memory() {
    if let Ok(name) = std::env::var(CHILD) {
        return child(&name);
    }
    use hwtensor::handoff::{recv, send};
    let (pipe, mut process) = common::spawn_pipe_peer(TWO_PROCESSES, CHILD, WAIT);
    assert_eq!(pipe.peer_pid().unwrap(), process.id());
    let t = Tensor::<u32>::new(&[256, 256], Some(TensorMemory::Shm)).unwrap();
    t.map_write()
        .unwrap()
        .iter_mut()
        .enumerate()
        .for_each(|(i, v)| *v = i as u32);
    send(&pipe, &t.clone().into()).unwrap();
    recv(&pipe, WAIT).unwrap(); // the child's "done"
    assert!(process.wait().unwrap().success(), "the child failed");
    let answered = t
        .map_read()
        .unwrap()
        .iter()
        .enumerate()
        .all(|(i, &v)| v == !(i as u32));
    assert!(answered, "the child's answer is not in our memory");
}
