//! The Windows backings besides the heap and the device's textures: shared memory as a
//! pagefile-backed section (`section.rs`).

mod section;

pub(crate) use section::SectionMapping;
