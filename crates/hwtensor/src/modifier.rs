//! DRM format modifiers: how an image's pixels are laid out in its memory beyond format and
//! stride (tiling, compression), as Linux's DRM/KMS, V4L2, Vulkan
//! (`VK_EXT_image_drm_format_modifier`), Wayland and PipeWire hand buffers around.
//!
//! hwtensor's own images are linear. A modifier that is not is carried unchanged -- through
//! the blob, the channel, the C ABI and Python -- so a frame from a tiling decoder reaches the
//! device that can read it; but everything that would read the bytes as rows refuses it by
//! name: CPU maps, views, host and device copies. DRM keeps one modifier per framebuffer (its
//! planes must agree: `drmModeAddFB2WithModifiers` refuses planes that differ), and so does an
//! image here.

/// A DRM format modifier (`DRM_FORMAT_MOD_*` of `drm_fourcc.h`): the vendor in the top byte,
/// the layout below.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct DrmModifier(pub u64);

/// `(vendor code, name)` of the vendors `drm_fourcc.h` assigns, for errors that name one.
const VENDORS: &[(u8, &str)] = &[
    (0x01, "Intel"),
    (0x02, "AMD"),
    (0x03, "NVIDIA"),
    (0x04, "Samsung"),
    (0x05, "Qualcomm"),
    (0x06, "Vivante"),
    (0x07, "Broadcom"),
    (0x08, "ARM"),
    (0x09, "Allwinner"),
    (0x0a, "Amlogic"),
    (0x0b, "MediaTek"),
];

impl DrmModifier {
    /// `DRM_FORMAT_MOD_LINEAR`: rows one after another, `row_stride` apart.
    pub const LINEAR: DrmModifier = DrmModifier(0);
    /// `DRM_FORMAT_MOD_INVALID`: "no explicit modifier" (the driver's implicit layout), which
    /// nothing here can read as rows either.
    pub const INVALID: DrmModifier = DrmModifier(0x00ff_ffff_ffff_ffff);

    /// Whether the pixels are plain rows (what the CPU and host copies can read).
    pub fn is_linear(self) -> bool {
        self == DrmModifier::LINEAR
    }

    /// The vendor `drm_fourcc.h` assigns the modifier's top byte, if it is one it lists.
    pub fn vendor(self) -> Option<&'static str> {
        let code = (self.0 >> 56) as u8;
        VENDORS
            .iter()
            .find(|(c, _)| *c == code)
            .map(|(_, name)| *name)
    }

    /// The refusal of `what` (a CPU map, a view, a copy) on an image of this layout.
    pub(crate) fn refusal(self, what: &str) -> crate::Error {
        crate::Error::Image(format!(
            "{what} reads the image as rows, and its DRM format modifier is {self}: only a \
             device that understands that layout can read it (import it there), or have the \
             producer hand over a linear buffer"
        ))
    }
}

impl std::fmt::Display for DrmModifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            DrmModifier::LINEAR => write!(f, "LINEAR"),
            DrmModifier::INVALID => write!(f, "INVALID (implicit, driver-specific)"),
            m => match m.vendor() {
                Some(vendor) => write!(f, "{:#018x} ({vendor})", m.0),
                None => write!(f, "{:#018x} (vendor unknown)", m.0),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_modifier_names_its_vendor_and_linear_is_the_default() {
        assert_eq!(DrmModifier::default(), DrmModifier::LINEAR);
        assert!(DrmModifier::LINEAR.is_linear() && !DrmModifier::INVALID.is_linear());
        let x_tiled = DrmModifier(0x0100_0000_0000_0001); // I915_FORMAT_MOD_X_TILED
        assert_eq!(x_tiled.to_string(), "0x0100000000000001 (Intel)");
        assert_eq!(DrmModifier(0x7f00_0000_0000_0001).vendor(), None);
        let refused = x_tiled.refusal("a CPU map").to_string();
        assert!(
            refused.contains("a CPU map") && refused.contains("Intel"),
            "{refused}"
        );
    }
}
