//! DRM format modifiers: carried unchanged, refused by name wherever bytes would be read as
//! rows, and kept by the blob (whose linear images stay the 168-byte v1 header).

use hwtensor::{
    CpuAccess, Direction, DrmModifier, Error, ImageSpec, PixelFormat, Region, Tensor, TensorDyn,
    TensorMemory,
};

mod common;
use common::SHARED;

/// `I915_FORMAT_MOD_X_TILED` of `drm_fourcc.h`.
const X_TILED: DrmModifier = DrmModifier(0x0100_0000_0000_0001);

fn frame() -> Tensor<u8> {
    Tensor::<u8>::image(
        &ImageSpec::new(PixelFormat::Rgba, 64, 16),
        Some(SHARED),
        CpuAccess::ReadWrite,
    )
    .unwrap()
}

fn names_the_layout(e: Error) -> String {
    let text = e.to_string();
    assert!(
        text.contains("DRM format modifier") && text.contains("Intel"),
        "{text}"
    );
    text
}

#[test]
fn a_tiled_image_refuses_maps_views_and_copies_naming_its_modifier() {
    let linear = frame();
    let tiled = linear.with_drm_modifier(X_TILED).unwrap();
    assert_eq!(
        (linear.drm_modifier(), tiled.drm_modifier()),
        (DrmModifier::LINEAR, X_TILED)
    );
    assert_eq!(tiled.access(), CpuAccess::None);
    names_the_layout(tiled.map_read().err().unwrap());
    names_the_layout(tiled.map_write().err().unwrap());
    names_the_layout(
        TensorDyn::from(tiled.clone())
            .map_bytes(Direction::Read)
            .err()
            .unwrap(),
    );
    names_the_layout(tiled.view(Region::new(0, 0, 8, 8)).unwrap_err());
    assert!(names_the_layout(linear.copy_from(&tiled).unwrap_err()).contains("a copy"));
    names_the_layout(tiled.to_memory(TensorMemory::Mem).unwrap_err());
    // The linear tensor over the same buffer is what it was.
    linear.map_write().unwrap().fill(1);
}

#[test]
fn a_plain_tensor_has_no_modifier_to_set() {
    let t = Tensor::<u8>::new(&[16], Some(TensorMemory::Mem)).unwrap();
    assert_eq!(t.drm_modifier(), DrmModifier::LINEAR);
    assert!(matches!(t.with_drm_modifier(X_TILED), Err(Error::Image(_))));
}

#[cfg(target_os = "linux")]
mod blobs {
    use super::*;
    use hwtensor::blob::{self, Transport, REQUIRES_DRM_MODIFIER};

    /// The header's `header_len` and `required` words.
    fn header(b: &[u8]) -> (u16, u32) {
        (
            u16::from_le_bytes([b[6], b[7]]),
            u32::from_le_bytes(b[12..16].try_into().unwrap()),
        )
    }

    fn reference(t: &Tensor<u8>) -> (Vec<u8>, Vec<std::os::fd::OwnedFd>) {
        let t = TensorDyn::from(t.clone());
        let (bytes, fds) = blob::export(&t, Transport::Reference).unwrap();
        (
            bytes,
            fds.iter()
                .map(|f| f.try_clone_to_owned().unwrap())
                .collect(),
        )
    }

    #[test]
    fn a_tiled_image_travels_by_reference_with_its_modifier_and_a_linear_one_as_before() {
        let linear = frame();
        let (bytes, _) = reference(&linear);
        assert_eq!(header(&bytes).0, 168, "a linear image keeps the v1 header");
        assert_eq!(header(&bytes).1 & REQUIRES_DRM_MODIFIER, 0);
        let (bytes, fds) = reference(&linear.with_drm_modifier(X_TILED).unwrap());
        let (len, required) = header(&bytes);
        assert_eq!(
            (len, required & REQUIRES_DRM_MODIFIER),
            (176, REQUIRES_DRM_MODIFIER)
        );
        let back = blob::import(&bytes, fds).unwrap();
        assert_eq!(back.drm_modifier(), X_TILED);
        assert_eq!(back.access(), CpuAccess::None);
        assert!(back.map_bytes(Direction::Read).is_err());
    }

    #[test]
    fn a_tiled_image_is_not_sent_inline_since_its_bytes_are_not_rows() {
        let tiled = TensorDyn::from(frame().with_drm_modifier(X_TILED).unwrap());
        names_the_layout(blob::export_inline(&tiled).unwrap_err());
    }

    #[test]
    fn a_blob_whose_modifier_bit_and_field_disagree_is_refused() {
        let (tiled, fds) = reference(&frame().with_drm_modifier(X_TILED).unwrap());
        let mut no_bit = tiled.clone();
        no_bit[12..16].copy_from_slice(&(header(&tiled).1 & !REQUIRES_DRM_MODIFIER).to_le_bytes());
        let err = blob::import(&no_bit, fds).unwrap_err().to_string();
        assert!(err.contains("drm_modifier"), "{err}");
        let (linear, fds) = reference(&frame());
        let mut bit_only = linear.clone();
        bit_only[12..16]
            .copy_from_slice(&(header(&linear).1 | REQUIRES_DRM_MODIFIER).to_le_bytes());
        let err = blob::import(&bit_only, fds).unwrap_err().to_string();
        assert!(err.contains("no drm_modifier field"), "{err}");
    }
}
