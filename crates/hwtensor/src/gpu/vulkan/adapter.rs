//! Adapters: what Vulkan devices this machine has, and which one `HWTENSOR_GPU_ADAPTER` picks.

use std::ffi::CStr;

use ash::vk;

/// The environment variable that selects the adapter.
pub const ADAPTER_ENV: &str = "HWTENSOR_GPU_ADAPTER";

/// The kind of device an adapter is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdapterKind {
    /// A GPU of its own (PCIe card).
    Discrete,
    /// A GPU sharing the CPU's memory.
    Integrated,
    /// A GPU of a virtual machine.
    Virtual,
    /// A CPU implementation (lavapipe, SwiftShader): a real, conformant device without hardware.
    Software,
    /// Anything else the driver reports.
    Other,
}

impl AdapterKind {
    fn from_vk(t: vk::PhysicalDeviceType) -> Self {
        match t {
            vk::PhysicalDeviceType::DISCRETE_GPU => AdapterKind::Discrete,
            vk::PhysicalDeviceType::INTEGRATED_GPU => AdapterKind::Integrated,
            vk::PhysicalDeviceType::VIRTUAL_GPU => AdapterKind::Virtual,
            vk::PhysicalDeviceType::CPU => AdapterKind::Software,
            _ => AdapterKind::Other,
        }
    }

    /// Preference among hardware adapters: discrete, then integrated, then virtual.
    fn hardware_rank(self) -> Option<u8> {
        match self {
            AdapterKind::Discrete => Some(0),
            AdapterKind::Integrated => Some(1),
            AdapterKind::Virtual => Some(2),
            _ => None,
        }
    }
}

/// One Vulkan physical device, described.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct AdapterInfo {
    /// The driver's name for the device.
    pub name: String,
    /// What sort of adapter it is.
    pub kind: AdapterKind,
    /// PCI vendor id.
    pub vendor_id: u32,
    /// PCI device id.
    pub device_id: u32,
    /// Vulkan `deviceUUID`: with the driver UUID, what names a device across processes and APIs (CUDA's device UUID is the same).
    pub device_uuid: [u8; 16],
    /// Vulkan `driverUUID`.
    pub driver_uuid: [u8; 16],
    /// The LUID, where the driver reports a valid one (lavapipe and NVIDIA on Linux do not).
    pub luid: Option<[u8; 8]>,
    /// The driver's name (`VkPhysicalDeviceDriverProperties`).
    pub driver_name: String,
    /// The driver's version text.
    pub driver_info: String,
    /// The driver's version number.
    pub driver_version: u32,
    /// The highest Vulkan version the device supports.
    pub api_version: u32,
    /// Where the device sits on the PCI bus, where the driver says (`VK_EXT_pci_bus_info`):
    /// what `nvidia-smi` and `lspci` name a GPU by.
    pub pci: Option<PciAddress>,
}

/// A PCI address: `domain:bus:device.function`, as `lspci` writes it (`0000:3b:00.0`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    /// PCI domain (segment).
    pub domain: u32,
    /// Bus number.
    pub bus: u8,
    /// Device number.
    pub device: u8,
    /// Function number.
    pub function: u8,
}

impl PciAddress {
    /// Parses `domain:bus:device.function` (a domain of 4 hex digits as `lspci` writes it, or 8
    /// as `nvidia-smi` does) or `bus:device.function` (domain 0). Case-insensitive.
    pub fn parse(text: &str) -> Option<PciAddress> {
        let (head, function) = text.trim().rsplit_once('.')?;
        let parts: Vec<&str> = head.split(':').collect();
        let (domain, bus, device) = match parts[..] {
            [d, b, dev] if (4..=8).contains(&d.len()) => (u32::from_str_radix(d, 16).ok()?, b, dev),
            [b, dev] => (0, b, dev),
            _ => return None,
        };
        let hex = |s: &str, max: u8| {
            (s.len() <= 2)
                .then(|| u8::from_str_radix(s, 16).ok())
                .flatten()
                .filter(|v| *v <= max)
        };
        Some(PciAddress {
            domain,
            bus: hex(bus, u8::MAX)?,
            device: hex(device, 0x1f)?,
            function: (function.len() == 1).then(|| hex(function, 7)).flatten()?,
        })
    }
}

impl std::fmt::Display for PciAddress {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

impl AdapterInfo {
    /// Whether this is a CPU implementation, judged by the device type (never by the name).
    pub fn is_software(&self) -> bool {
        self.kind == AdapterKind::Software
    }

    /// `"name (kind, Vulkan x.y.z)"`, for logs and the probe.
    pub fn label(&self) -> String {
        format!(
            "{} ({:?}, Vulkan {}.{}.{})",
            self.name,
            self.kind,
            vk::api_version_major(self.api_version),
            vk::api_version_minor(self.api_version),
            vk::api_version_patch(self.api_version)
        )
    }

    /// Reads the description of `physical` (needs Vulkan 1.1 properties2, which every device
    /// with timeline semaphores has).
    pub(crate) fn query(instance: &ash::Instance, physical: vk::PhysicalDevice) -> AdapterInfo {
        let mut id = vk::PhysicalDeviceIDProperties::default();
        let mut driver = vk::PhysicalDeviceDriverProperties::default();
        let mut pci = vk::PhysicalDevicePCIBusInfoPropertiesEXT::default();
        let has_pci = has_extension(instance, physical, ash::ext::pci_bus_info::NAME);
        let mut props2 = vk::PhysicalDeviceProperties2::default()
            .push_next(&mut id)
            .push_next(&mut driver);
        if has_pci {
            // Chained only where the device has the extension: otherwise invalid usage.
            props2 = props2.push_next(&mut pci);
        }
        // SAFETY: `physical` was enumerated from `instance`, and the chained structs outlive the call.
        unsafe { instance.get_physical_device_properties2(physical, &mut props2) };
        let p = props2.properties;
        AdapterInfo {
            name: c_chars(&p.device_name),
            kind: AdapterKind::from_vk(p.device_type),
            vendor_id: p.vendor_id,
            device_id: p.device_id,
            device_uuid: id.device_uuid,
            driver_uuid: id.driver_uuid,
            luid: (id.device_luid_valid == vk::TRUE).then_some(id.device_luid),
            driver_name: c_chars(&driver.driver_name),
            driver_info: c_chars(&driver.driver_info),
            driver_version: p.driver_version,
            api_version: p.api_version,
            pci: has_pci.then_some(PciAddress {
                domain: pci.pci_domain,
                bus: pci.pci_bus as u8,
                device: pci.pci_device as u8,
                function: pci.pci_function as u8,
            }),
        }
    }
}

/// Whether `physical` offers the device extension `name`.
fn has_extension(instance: &ash::Instance, physical: vk::PhysicalDevice, name: &CStr) -> bool {
    // SAFETY: a query on a device enumerated from this instance.
    let Ok(all) = (unsafe { instance.enumerate_device_extension_properties(physical) }) else {
        return false;
    };
    all.iter()
        .any(|e| e.extension_name_as_c_str().is_ok_and(|n| n == name))
}

fn c_chars(chars: &[std::ffi::c_char]) -> String {
    // SAFETY: Vulkan fixed-size name arrays are NUL-terminated within their length.
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(chars.as_ptr().cast(), chars.len()) };
    CStr::from_bytes_until_nul(bytes)
        .map(|c| c.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// What `HWTENSOR_GPU_ADAPTER` asks for.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum AdapterChoice {
    /// Unset or `hardware`: the best hardware device; the software one if there is none.
    Hardware,
    /// A CPU device (lavapipe, SwiftShader).
    Software,
    /// A discrete GPU.
    Discrete,
    /// An integrated GPU.
    Integrated,
    /// A device UUID (32 hex digits, dashes allowed).
    Uuid([u8; 16]),
    /// A PCI address (`0000:3b:00.0`, `00000000:3B:00.0` as `nvidia-smi` prints it, `3b:00.0`).
    Pci(PciAddress),
    /// The adapter's index in the list `hwtensor probe` prints (Vulkan's enumeration order).
    Index(usize),
    /// A case-insensitive substring of the device name.
    Name(String),
}

impl AdapterChoice {
    /// Parses the variable's value. Total: anything that is not a keyword or a UUID is a name.
    pub fn parse(value: Option<&str>) -> AdapterChoice {
        let Some(v) = value.map(str::trim).filter(|v| !v.is_empty()) else {
            return AdapterChoice::Hardware;
        };
        match v.to_ascii_lowercase().as_str() {
            "hardware" | "default" => AdapterChoice::Hardware,
            "software" | "cpu" => AdapterChoice::Software,
            "discrete" => AdapterChoice::Discrete,
            "integrated" => AdapterChoice::Integrated,
            _ => parse_uuid(v)
                .map(AdapterChoice::Uuid)
                .or_else(|| PciAddress::parse(v).map(AdapterChoice::Pci))
                .or_else(|| v.parse().ok().map(AdapterChoice::Index))
                .unwrap_or_else(|| AdapterChoice::Name(v.to_string())),
        }
    }

    /// The choice the environment makes.
    pub fn from_env() -> AdapterChoice {
        AdapterChoice::parse(std::env::var(ADAPTER_ENV).ok().as_deref())
    }

    fn matches(&self, a: &AdapterInfo) -> bool {
        match self {
            AdapterChoice::Hardware => a.kind.hardware_rank().is_some(),
            AdapterChoice::Software => a.is_software(),
            AdapterChoice::Discrete => a.kind == AdapterKind::Discrete,
            AdapterChoice::Integrated => a.kind == AdapterKind::Integrated,
            AdapterChoice::Uuid(u) => a.device_uuid == *u,
            AdapterChoice::Pci(p) => a.pci == Some(*p),
            AdapterChoice::Index(_) => false, // by position: see `select`
            AdapterChoice::Name(n) => a.name.to_lowercase().contains(&n.to_lowercase()),
        }
    }
}

fn parse_uuid(v: &str) -> Option<[u8; 16]> {
    let hex: String = v.chars().filter(|c| *c != '-').collect();
    if hex.len() != 32 || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(out)
}

/// Formats a UUID the way `HWTENSOR_GPU_ADAPTER` accepts it.
pub fn format_uuid(u: &[u8; 16]) -> String {
    let h: String = u.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// The index of the adapter `choice` selects among `adapters`, `None` when it selects none.
///
/// Hardware (the default) prefers discrete, then integrated, then virtual, and among adapters
/// of one kind the lowest PCI address (then UUID): the same device on every run, whatever order
/// the loader enumerates them in. It falls back to software when there is no hardware. An explicit choice selects only what it names: a request
/// for an adapter the machine lacks is an error (see [`select_or_explain`]), not a silent
/// fallback to another device.
pub fn select(choice: &AdapterChoice, adapters: &[AdapterInfo]) -> Option<usize> {
    let best_hardware = || {
        (0..adapters.len())
            .filter_map(|i| {
                let a = &adapters[i];
                a.kind
                    .hardware_rank()
                    .map(|r| ((r, a.pci.is_none(), a.pci, a.device_uuid), i))
            })
            .min()
            .map(|(_, i)| i)
    };
    let default = || {
        best_hardware()
            .or_else(|| adapters.iter().position(AdapterInfo::is_software))
            .or((!adapters.is_empty()).then_some(0))
    };
    match choice {
        AdapterChoice::Hardware => default(),
        AdapterChoice::Index(i) => (*i < adapters.len()).then_some(*i),
        other => adapters.iter().position(|a| other.matches(a)),
    }
}

/// [`select`], with an error that names the adapters present when the choice selects none.
pub(crate) fn select_or_explain(
    choice: &AdapterChoice,
    adapters: &[AdapterInfo],
) -> crate::Result<usize> {
    select(choice, adapters).ok_or_else(|| {
        if adapters.is_empty() {
            crate::Error::gpu(
                crate::GpuErrorKind::Unsupported,
                "no Vulkan adapter on this machine",
            )
        } else {
            crate::gpu::no_adapter_matches(
                &choice.to_string(),
                adapters.iter().enumerate().map(|(i, a)| {
                    let pci = a.pci.map(|p| format!(" at {p}")).unwrap_or_default();
                    format!("#{i} {} {}{pci}", a.label(), format_uuid(&a.device_uuid))
                }),
            )
        }
    })
}

impl std::fmt::Display for AdapterChoice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AdapterChoice::Hardware => f.write_str("hardware"),
            AdapterChoice::Software => f.write_str("software"),
            AdapterChoice::Discrete => f.write_str("discrete"),
            AdapterChoice::Integrated => f.write_str("integrated"),
            AdapterChoice::Uuid(u) => f.write_str(&format_uuid(u)),
            AdapterChoice::Pci(p) => write!(f, "{p}"),
            AdapterChoice::Index(i) => write!(f, "{i}"),
            AdapterChoice::Name(n) => f.write_str(n),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn adapter(name: &str, kind: AdapterKind, uuid: u8) -> AdapterInfo {
        AdapterInfo {
            name: name.into(),
            kind,
            vendor_id: 0,
            device_id: 0,
            device_uuid: [uuid; 16],
            driver_uuid: [0; 16],
            luid: None,
            driver_name: String::new(),
            driver_info: String::new(),
            driver_version: 0,
            api_version: vk::API_VERSION_1_3,
            pci: None,
        }
    }

    fn at(mut a: AdapterInfo, bus: u8) -> AdapterInfo {
        a.pci = Some(PciAddress {
            domain: 0,
            bus,
            device: 0,
            function: 0,
        });
        a
    }

    #[test]
    fn pci_addresses_parse_as_lspci_and_nvidia_smi_write_them_and_print_back() {
        let want = PciAddress {
            domain: 0,
            bus: 0x3b,
            device: 0,
            function: 0,
        };
        for text in [
            "0000:3b:00.0",
            "00000000:3B:00.0",
            "3b:00.0",
            " 0000:3B:00.0 ",
        ] {
            assert_eq!(PciAddress::parse(text), Some(want), "{text}");
        }
        assert_eq!(want.to_string(), "0000:3b:00.0");
        for bad in [
            "3b:00",
            "0000:3b:20.0",
            "0000:3b:00.8",
            "zz:00.0",
            "1:2:3:4.0",
            "00:00.00",
        ] {
            assert_eq!(PciAddress::parse(bad), None, "{bad}");
        }
        assert_eq!(
            AdapterChoice::parse(Some("0000:3b:00.0")),
            AdapterChoice::Pci(want)
        );
        assert_eq!(AdapterChoice::parse(Some("1")), AdapterChoice::Index(1));
    }

    #[test]
    fn two_gpus_are_chosen_by_index_or_bus_and_the_default_is_the_same_in_any_order() {
        let a = at(adapter("NVIDIA H200", AdapterKind::Discrete, 7), 0x9a);
        let b = at(adapter("NVIDIA H200", AdapterKind::Discrete, 3), 0x3b);
        let one = vec![a.clone(), b.clone()];
        let other = vec![b, a];
        // The default: the lowest bus, whichever order the loader lists them in.
        assert_eq!(
            one[select(&AdapterChoice::Hardware, &one).unwrap()].device_uuid,
            [3; 16]
        );
        assert_eq!(
            other[select(&AdapterChoice::Hardware, &other).unwrap()].device_uuid,
            [3; 16]
        );
        let bus = AdapterChoice::parse(Some("0000:9a:00.0"));
        assert_eq!(one[select(&bus, &one).unwrap()].device_uuid, [7; 16]);
        assert_eq!(select(&AdapterChoice::Index(1), &one), Some(1));
        assert_eq!(select(&AdapterChoice::Index(2), &one), None);
        let err = select_or_explain(&AdapterChoice::Index(5), &one)
            .unwrap_err()
            .to_string();
        assert!(err.contains("#1") && err.contains("0000:3b:00.0"), "{err}");
    }

    fn machine() -> Vec<AdapterInfo> {
        vec![
            adapter("llvmpipe (LLVM 15.0.6, 256 bits)", AdapterKind::Software, 1),
            adapter("Mali-G610", AdapterKind::Integrated, 2),
            adapter("NVIDIA H200", AdapterKind::Discrete, 3),
        ]
    }

    #[test]
    fn every_form_of_the_variable_parses() {
        assert_eq!(AdapterChoice::parse(None), AdapterChoice::Hardware);
        assert_eq!(AdapterChoice::parse(Some("  ")), AdapterChoice::Hardware);
        assert_eq!(
            AdapterChoice::parse(Some("Hardware")),
            AdapterChoice::Hardware
        );
        assert_eq!(
            AdapterChoice::parse(Some("software")),
            AdapterChoice::Software
        );
        assert_eq!(
            AdapterChoice::parse(Some("DISCRETE")),
            AdapterChoice::Discrete
        );
        assert_eq!(
            AdapterChoice::parse(Some("integrated")),
            AdapterChoice::Integrated
        );
        assert_eq!(
            AdapterChoice::parse(Some("03030303-0303-0303-0303-030303030303")),
            AdapterChoice::Uuid([3; 16])
        );
        assert_eq!(
            AdapterChoice::parse(Some("0303030303030303030303030303030")),
            AdapterChoice::Name("0303030303030303030303030303030".into())
        );
        assert_eq!(
            AdapterChoice::parse(Some("H200")),
            AdapterChoice::Name("H200".into())
        );
    }

    #[test]
    fn hardware_prefers_discrete_then_integrated_then_software() {
        let m = machine();
        assert_eq!(select(&AdapterChoice::Hardware, &m), Some(2));
        assert_eq!(select(&AdapterChoice::Hardware, &m[..2]), Some(1));
        assert_eq!(
            select(&AdapterChoice::Hardware, &m[..1]),
            Some(0),
            "software when there is no hardware"
        );
        assert_eq!(select(&AdapterChoice::Hardware, &[]), None);
    }

    #[test]
    fn explicit_choices_pick_their_adapter() {
        let m = machine();
        assert_eq!(select(&AdapterChoice::Software, &m), Some(0));
        assert_eq!(select(&AdapterChoice::Integrated, &m), Some(1));
        assert_eq!(select(&AdapterChoice::Uuid([3; 16]), &m), Some(2));
        assert_eq!(select(&AdapterChoice::Name("mali".into()), &m), Some(1));
    }

    #[test]
    fn a_choice_that_matches_nothing_is_an_error_naming_the_adapters_present() {
        let m = machine();
        assert_eq!(select(&AdapterChoice::Name("radeon".into()), &m), None);
        assert_eq!(select(&AdapterChoice::Discrete, &m[..1]), None);
        let err = select_or_explain(&AdapterChoice::Name("radeon".into()), &m).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("HWTENSOR_GPU_ADAPTER=radeon"), "{text}");
        for a in &m {
            assert!(text.contains(&a.name), "{text} lacks {}", a.name);
        }
        assert_eq!(err.gpu_kind(), Some(crate::GpuErrorKind::Unsupported));
        assert!(select_or_explain(&AdapterChoice::Hardware, &[]).is_err());
    }

    #[test]
    fn uuids_print_the_way_they_parse() {
        let u = [0xab; 16];
        assert_eq!(
            AdapterChoice::parse(Some(&format_uuid(&u))),
            AdapterChoice::Uuid(u)
        );
    }
}
