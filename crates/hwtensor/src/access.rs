//! Who may touch a tensor's bytes ([`CpuAccess`], declared when it is made) and how one access
//! touches them ([`Direction`], and its type-level markers [`ReadOnly`], [`WriteOnly`] and
//! [`ReadWrite`] that CPU and CUDA maps carry): the words every layer speaks, from the backings
//! to the maps.

/// The CPU access a tensor's users declare when it is made.
///
/// It tells the library which cache maintenance a buffer needs and lets it refuse a map in a
/// direction nobody declared: a camera frame declared `Read` cannot be scribbled on by mistake.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum CpuAccess {
    /// No CPU access: the tensor is only for devices.
    None = 0,
    /// The CPU may read.
    Read = 1,
    /// The CPU may write.
    Write = 2,
    /// The CPU may read and write.
    ReadWrite = 3,
}

impl CpuAccess {
    /// Whether this access covers a CPU access in `direction`.
    pub fn allows(self, direction: Direction) -> bool {
        let bits = self as u8;
        let need = match direction {
            Direction::Read => CpuAccess::Read as u8,
            Direction::Write => CpuAccess::Write as u8,
            Direction::ReadWrite => CpuAccess::ReadWrite as u8,
        };
        bits & need == need
    }

    /// The access both `self` and `other` allow.
    pub fn narrowed_to(self, other: CpuAccess) -> CpuAccess {
        match (self as u8) & (other as u8) {
            0 => CpuAccess::None,
            1 => CpuAccess::Read,
            2 => CpuAccess::Write,
            _ => CpuAccess::ReadWrite,
        }
    }
}

/// The direction of one CPU access.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Direction {
    /// A read map.
    Read,
    /// A write map.
    Write,
    /// A read-write map.
    ReadWrite,
}

/// Marker of a map's direction.
pub trait MapDirection: private::Sealed {
    /// The direction of the CPU access.
    const DIRECTION: Direction;
}

/// Marker for maps that allow mutation.
pub trait Writable: MapDirection {}

/// Read-only maps.
#[derive(Debug)]
pub enum ReadOnly {}
/// Write-only maps (they deref for reading, but the bytes are only guaranteed to be the
/// device's after a write map has been dropped).
#[derive(Debug)]
pub enum WriteOnly {}
/// Read-write maps.
#[derive(Debug)]
pub enum ReadWrite {}

mod private {
    pub trait Sealed {}
    impl Sealed for super::ReadOnly {}
    impl Sealed for super::WriteOnly {}
    impl Sealed for super::ReadWrite {}
}

impl MapDirection for ReadOnly {
    const DIRECTION: Direction = Direction::Read;
}
impl MapDirection for WriteOnly {
    const DIRECTION: Direction = Direction::Write;
}
impl MapDirection for ReadWrite {
    const DIRECTION: Direction = Direction::ReadWrite;
}
impl Writable for WriteOnly {}
impl Writable for ReadWrite {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn declared_access_decides_each_direction() {
        assert!(CpuAccess::Read.allows(Direction::Read));
        assert!(!CpuAccess::Read.allows(Direction::Write));
        assert!(!CpuAccess::Write.allows(Direction::ReadWrite));
        assert!(CpuAccess::ReadWrite.allows(Direction::ReadWrite));
        assert!(!CpuAccess::None.allows(Direction::Read));
        assert_eq!(
            CpuAccess::ReadWrite.narrowed_to(CpuAccess::Read),
            CpuAccess::Read
        );
        assert_eq!(
            CpuAccess::Write.narrowed_to(CpuAccess::Read),
            CpuAccess::None
        );
    }
}
