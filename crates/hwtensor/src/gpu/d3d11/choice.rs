//! `HWTENSOR_GPU_ADAPTER` on Windows, parsed: a pure function of the text, compiled and tested
//! on every platform (lib.rs includes it in Linux test builds too).

/// What `HWTENSOR_GPU_ADAPTER` asks for on Windows.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdapterChoice {
    /// Unset, empty or `hardware`: the default adapter (the one DXGI lists first).
    Hardware,
    /// `warp` or `software`: the WARP driver type, Microsoft's CPU rasteriser.
    Warp,
    /// `discrete`: the first adapter with dedicated video memory that is not WARP.
    Discrete,
    /// `high:low`: an adapter LUID, each half decimal or `0x` hex.
    Luid {
        /// The LUID's high half (signed, as Windows declares it).
        high: i32,
        /// The LUID's low half.
        low: u32,
    },
    /// Anything else: a case-insensitive substring of the adapter description.
    Description(String),
}

impl AdapterChoice {
    /// Parses the variable's value; `None` and blank are the default.
    pub fn parse(value: Option<&str>) -> AdapterChoice {
        let text = value.map(str::trim).unwrap_or("");
        match text.to_ascii_lowercase().as_str() {
            "" | "hardware" | "default" => AdapterChoice::Hardware,
            "warp" | "software" => AdapterChoice::Warp,
            "discrete" => AdapterChoice::Discrete,
            _ => parse_luid(text).unwrap_or_else(|| AdapterChoice::Description(text.to_owned())),
        }
    }

    /// Whether `description` (an adapter's DXGI description) matches a description choice.
    pub fn matches_description(&self, description: &str) -> bool {
        match self {
            AdapterChoice::Description(want) => description
                .to_ascii_lowercase()
                .contains(&want.to_ascii_lowercase()),
            _ => false,
        }
    }
}

/// `high:low`, each part decimal or `0x` hex; the high part is signed, as in `LUID`.
fn parse_luid(text: &str) -> Option<AdapterChoice> {
    let (high, low) = text.split_once(':')?;
    let high = parse_number(high)?;
    let low = parse_number(low)?;
    Some(AdapterChoice::Luid {
        high: i32::try_from(high)
            .ok()
            .or_else(|| Some(u32::try_from(high).ok()? as i32))?,
        low: u32::try_from(low).ok()?,
    })
}

fn parse_number(text: &str) -> Option<i64> {
    let text = text.trim();
    match text.strip_prefix("0x").or_else(|| text.strip_prefix("0X")) {
        Some(hex) => i64::from_str_radix(hex, 16).ok(),
        None => text.parse().ok(),
    }
}

/// Whether an adapter description names WARP (used when WARP was not chosen explicitly, for
/// example when it is the only adapter: DXGI reports it as a "Basic Render Driver").
pub fn description_is_warp(description: &str) -> bool {
    let d = description.to_ascii_lowercase();
    d.contains("microsoft basic render") || d.contains("warp")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unset_blank_and_hardware_choose_the_default_adapter() {
        for v in [
            None,
            Some(""),
            Some("  "),
            Some("hardware"),
            Some("HARDWARE"),
        ] {
            assert_eq!(AdapterChoice::parse(v), AdapterChoice::Hardware, "{v:?}");
        }
    }

    #[test]
    fn warp_and_software_both_choose_the_warp_driver() {
        assert_eq!(AdapterChoice::parse(Some("warp")), AdapterChoice::Warp);
        assert_eq!(AdapterChoice::parse(Some("Software")), AdapterChoice::Warp);
    }

    #[test]
    fn discrete_is_its_own_choice() {
        assert_eq!(
            AdapterChoice::parse(Some("discrete")),
            AdapterChoice::Discrete
        );
    }

    #[test]
    fn a_luid_is_read_in_decimal_or_hex_halves() {
        assert_eq!(
            AdapterChoice::parse(Some("0:0x3f0")),
            AdapterChoice::Luid {
                high: 0,
                low: 0x3f0
            }
        );
        assert_eq!(
            AdapterChoice::parse(Some("1:1008")),
            AdapterChoice::Luid { high: 1, low: 1008 }
        );
        assert_eq!(
            AdapterChoice::parse(Some("0xffffffff:0x10")),
            AdapterChoice::Luid {
                high: -1,
                low: 0x10
            },
            "the high half is a signed LONG"
        );
    }

    #[test]
    fn text_that_is_not_a_luid_is_a_description_substring() {
        let c = AdapterChoice::parse(Some("GeForce GTX"));
        assert_eq!(c, AdapterChoice::Description("GeForce GTX".into()));
        assert!(c.matches_description("NVIDIA GeForce GTX 470"));
        assert!(!c.matches_description("AMD Radeon"));
        assert_eq!(
            AdapterChoice::parse(Some("12:zz")),
            AdapterChoice::Description("12:zz".into()),
            "a malformed LUID falls back to a description"
        );
        assert!(!AdapterChoice::Warp.matches_description("warp"));
    }

    #[test]
    fn warp_is_recognised_by_its_description() {
        assert!(description_is_warp("Microsoft Basic Render Driver"));
        assert!(!description_is_warp("NVIDIA GeForce GTX 470"));
    }
}
