//! Creating the process device: instance, adapter, the feature ladder, validation.

use std::ffi::{c_void, CStr};
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};

use ash::vk;

use super::super::adapter::{select_or_explain, AdapterChoice, AdapterInfo};
use super::super::vk_kind;
use crate::gpu::Features;
use crate::{Error, GpuErrorKind, Result};

/// The environment variable that turns on the Khronos validation layer.
pub const DEBUG_ENV: &str = "HWTENSOR_GPU_DEBUG";
const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";
/// What the device asks for: 1.3 where it exists; 1.2 is the minimum (core timeline semaphores).
const REQUESTED_API: u32 = vk::API_VERSION_1_3;
const MINIMUM_API: u32 = vk::API_VERSION_1_2;

/// Optional device extensions, most valued first; the ladder drops them from the end.
const OPTIONAL_EXTENSIONS: [(&CStr, u32); 4] = [
    (
        ash::khr::external_memory_fd::NAME,
        Features::EXTERNAL_MEMORY_FD,
    ),
    (
        ash::khr::external_semaphore_fd::NAME,
        Features::EXTERNAL_SEMAPHORE_FD,
    ),
    (
        ash::ext::external_memory_host::NAME,
        Features::EXTERNAL_MEMORY_HOST,
    ),
    (ash::ext::external_memory_dma_buf::NAME, Features::DMA_BUF),
];

/// Validation messages that carried a VUID, counted for tests that demand a clean run.
static VUID_MESSAGES: AtomicUsize = AtomicUsize::new(0);

/// Validation messages with a VUID seen by this copy so far.
pub fn validation_errors() -> usize {
    VUID_MESSAGES.load(Ordering::Relaxed)
}

/// A device this copy created.
pub(crate) struct Created {
    pub entry: ash::Entry,
    pub instance: ash::Instance,
    pub physical: vk::PhysicalDevice,
    pub device: ash::Device,
    pub families: QueueFamilies,
    pub info: AdapterInfo,
    pub features: Features,
    pub messenger: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
}

pub(crate) fn debug_requested() -> bool {
    std::env::var(DEBUG_ENV).is_ok_and(|v| matches!(v.trim(), "1" | "true" | "yes"))
}

/// Loads libvulkan at run time: a machine without it gets an error, not a failed link.
pub(crate) fn load_entry() -> Result<ash::Entry> {
    // SAFETY: loading the system Vulkan loader runs its initialisers, which is what it is for.
    unsafe { ash::Entry::load() }
        .map_err(|e| unsupported(format!("no Vulkan loader (libvulkan.so.1): {e}")))
}

/// An instance, and whether it runs the validation layer (with `VK_EXT_debug_utils`, so a
/// messenger may be made on it).
pub(crate) struct Instance {
    pub instance: ash::Instance,
    pub validating: bool,
}

/// An instance; with the validation layer where `debug` asks for it and the layer is installed.
pub(crate) fn create_instance(entry: &ash::Entry, debug: bool) -> Result<Instance> {
    // SAFETY: plain queries on a loaded entry.
    let layers = unsafe { entry.enumerate_instance_layer_properties() }.unwrap_or_default();
    let has_validation = layers
        .iter()
        .any(|l| l.layer_name_as_c_str() == Ok(VALIDATION_LAYER));
    if debug && !has_validation {
        log::warn!("{DEBUG_ENV}=1 but {VALIDATION_LAYER:?} is not installed; continuing without validation");
    }
    let validating = debug && has_validation;
    let (layer_names, ext_names): (Vec<*const i8>, Vec<*const i8>) = if validating {
        (
            vec![VALIDATION_LAYER.as_ptr()],
            vec![ash::ext::debug_utils::NAME.as_ptr()],
        )
    } else {
        (vec![], vec![])
    };
    let app = vk::ApplicationInfo::default()
        .application_name(c"hwtensor")
        .api_version(REQUESTED_API);
    let info = vk::InstanceCreateInfo::default()
        .application_info(&app)
        .enabled_layer_names(&layer_names)
        .enabled_extension_names(&ext_names);
    // SAFETY: every pointer in `info` refers to locals that outlive the call.
    let instance =
        unsafe { entry.create_instance(&info, None) }.map_err(super::failed("vkCreateInstance"))?;
    Ok(Instance {
        instance,
        validating,
    })
}

unsafe extern "system" fn on_validation_message(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    _user: *mut c_void,
) -> vk::Bool32 {
    // SAFETY: the layer passes valid callback data whose message is a C string for this call.
    let message = unsafe { data.as_ref().and_then(|d| d.message_as_c_str()) }
        .map(|m| m.to_string_lossy().into_owned())
        .unwrap_or_default();
    if message.contains("VUID") {
        VUID_MESSAGES.fetch_add(1, Ordering::Relaxed);
    }
    // Written to the stderr stream itself, not through eprintln!, which a test harness
    // captures (and drops for passing tests): CI greps this stream for VUIDs.
    let _ = writeln!(
        std::io::stderr(),
        "hwtensor: vulkan validation [{severity:?}]: {message}"
    );
    log::warn!("vulkan validation [{severity:?}]: {message}");
    vk::FALSE
}

fn create_messenger(
    entry: &ash::Entry,
    instance: &ash::Instance,
) -> Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)> {
    let utils = ash::ext::debug_utils::Instance::new(entry, instance);
    let info = vk::DebugUtilsMessengerCreateInfoEXT::default()
        .message_severity(
            vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
        )
        .message_type(
            vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                | vk::DebugUtilsMessageTypeFlagsEXT::GENERAL,
        )
        .pfn_user_callback(Some(on_validation_message));
    // SAFETY: the instance was created with VK_EXT_debug_utils enabled (`validating`).
    let messenger = unsafe { utils.create_debug_utils_messenger(&info, None) }.ok()?;
    Some((utils, messenger))
}

/// Every adapter this instance sees.
pub(crate) fn enumerate(
    instance: &ash::Instance,
) -> Result<Vec<(vk::PhysicalDevice, AdapterInfo)>> {
    // SAFETY: a plain query on a live instance.
    let physicals = unsafe { instance.enumerate_physical_devices() }.map_err(|e| {
        Error::gpu(
            vk_kind(e),
            format!("vkEnumeratePhysicalDevices failed: {e}"),
        )
    })?;
    Ok(physicals
        .into_iter()
        .map(|p| (p, AdapterInfo::query(instance, p)))
        .collect())
}

/// Creates the process device on the adapter `HWTENSOR_GPU_ADAPTER` selects.
pub(crate) fn create() -> Result<Created> {
    let entry = load_entry()?;
    let Instance {
        instance,
        validating,
    } = create_instance(&entry, debug_requested())?;
    // Only an instance with the layer has VK_EXT_debug_utils: asked of one without (the
    // layer not installed), ash panics, as it did on the H100 under HWTENSOR_GPU_DEBUG=1.
    let messenger = if validating {
        create_messenger(&entry, &instance)
    } else {
        None
    };
    let built = build_device(&instance);
    match built {
        Ok((physical, device, families, info, features)) => Ok(Created {
            entry,
            instance,
            physical,
            device,
            families,
            info,
            features,
            messenger,
        }),
        Err(e) => {
            if let Some((utils, m)) = messenger {
                // SAFETY: the messenger belongs to this instance and nothing else uses it.
                unsafe { utils.destroy_debug_utils_messenger(m, None) };
            }
            // SAFETY: no child object of the instance is left.
            unsafe { instance.destroy_instance(None) };
            Err(e)
        }
    }
}

type Built = (
    vk::PhysicalDevice,
    ash::Device,
    QueueFamilies,
    AdapterInfo,
    Features,
);

fn build_device(instance: &ash::Instance) -> Result<Built> {
    let adapters = enumerate(instance)?;
    let infos: Vec<AdapterInfo> = adapters.iter().map(|(_, i)| i.clone()).collect();
    let index = select_or_explain(&AdapterChoice::from_env(), &infos)?;
    let (physical, info) = adapters[index].clone();
    if info.api_version < MINIMUM_API || !has_timeline_semaphores(instance, physical) {
        return Err(unsupported(format!(
            "{} has no timeline semaphores (Vulkan 1.2), which hwtensor needs",
            info.label()
        )));
    }
    let queue_family = main_queue_family(instance, physical)
        .ok_or_else(|| unsupported(format!("{} has no compute queue", info.label())))?;
    let families = QueueFamilies {
        main: queue_family,
        transfer: transfer_queue_family(instance, physical),
    };
    let supported = supported_optional(instance, physical);
    let sync2 = info.api_version >= vk::API_VERSION_1_3 && has_synchronization2(instance, physical);
    let mut last_error = vk::Result::ERROR_INITIALIZATION_FAILED;
    for tier in 0..=supported.len() {
        let enabled = &supported[..supported.len() - tier];
        match create_logical(instance, physical, families, enabled, sync2) {
            Ok(device) => {
                let mut features = Features(enabled.iter().fold(0, |bits, (_, f)| bits | f));
                if sync2 {
                    features.0 |= Features::SYNCHRONIZATION2;
                }
                features.0 |= (tier as u32) << Features::TIER_SHIFT;
                log::info!(
                    "hwtensor: process GPU device on {} (feature tier {tier}: {features:?})",
                    info.label()
                );
                return Ok((physical, device, families, info, features));
            }
            Err(e) => {
                log::warn!(
                    "device creation at tier {tier} failed ({e}); dropping an optional extension"
                );
                last_error = e;
            }
        }
    }
    Err(Error::gpu(
        vk_kind(last_error),
        format!(
            "vkCreateDevice failed on {} even with no optional extensions: {last_error}",
            info.label()
        ),
    ))
}

/// A device this machine cannot give us: no loader, no adapter, a missing capability.
fn unsupported(message: impl Into<String>) -> Error {
    Error::gpu(GpuErrorKind::Unsupported, message)
}

fn has_timeline_semaphores(instance: &ash::Instance, physical: vk::PhysicalDevice) -> bool {
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut v12);
    // SAFETY: a query on an enumerated device; the chain outlives the call.
    unsafe { instance.get_physical_device_features2(physical, &mut f2) };
    v12.timeline_semaphore == vk::TRUE
}

fn has_synchronization2(instance: &ash::Instance, physical: vk::PhysicalDevice) -> bool {
    let mut v13 = vk::PhysicalDeviceVulkan13Features::default();
    let mut f2 = vk::PhysicalDeviceFeatures2::default().push_next(&mut v13);
    // SAFETY: as above.
    unsafe { instance.get_physical_device_features2(physical, &mut f2) };
    v13.synchronization2 == vk::TRUE
}

/// The queue families the process device uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QueueFamilies {
    /// The family of the main queue: signals and compute.
    pub main: u32,
    /// A transfer-only family, where the device has one: copies go there. On NVIDIA, switching
    /// the main queue between Vulkan work and CUDA work costs ~160 us each time; copies on the
    /// transfer queue avoid it (PLATFORM.md).
    pub transfer: Option<u32>,
}

impl QueueFamilies {
    /// The families a buffer is shared between (CONCURRENT sharing when there are two, so no
    /// ownership transfers are needed between the queues).
    pub(crate) fn all(&self) -> Vec<u32> {
        std::iter::once(self.main).chain(self.transfer).collect()
    }
}

/// A family that can transfer but neither draw nor compute: a copy engine.
fn transfer_queue_family(instance: &ash::Instance, physical: vk::PhysicalDevice) -> Option<u32> {
    // SAFETY: a query on an enumerated device.
    let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
    families
        .iter()
        .position(|f| {
            f.queue_count > 0
                && f.queue_flags.contains(vk::QueueFlags::TRANSFER)
                && !f
                    .queue_flags
                    .intersects(vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE)
        })
        .map(|i| i as u32)
}

/// The first family that can do compute (and graphics, where one can do both): the queue every
/// copy submits to.
fn main_queue_family(instance: &ash::Instance, physical: vk::PhysicalDevice) -> Option<u32> {
    // SAFETY: a query on an enumerated device.
    let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
    let has = |i: usize, f| families[i].queue_flags.contains(f) && families[i].queue_count > 0;
    (0..families.len())
        .find(|&i| has(i, vk::QueueFlags::GRAPHICS | vk::QueueFlags::COMPUTE))
        .or_else(|| (0..families.len()).find(|&i| has(i, vk::QueueFlags::COMPUTE)))
        .map(|i| i as u32)
}

fn supported_optional(
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
) -> Vec<(&'static CStr, u32)> {
    // SAFETY: a query on an enumerated device.
    let available =
        unsafe { instance.enumerate_device_extension_properties(physical) }.unwrap_or_default();
    let has = |name: &CStr| {
        available
            .iter()
            .any(|e| e.extension_name_as_c_str() == Ok(name))
    };
    OPTIONAL_EXTENSIONS
        .into_iter()
        .filter(|(name, _)| has(name))
        .collect()
}

fn create_logical(
    instance: &ash::Instance,
    physical: vk::PhysicalDevice,
    families: QueueFamilies,
    extensions: &[(&CStr, u32)],
    sync2: bool,
) -> Result<ash::Device, vk::Result> {
    let priorities = [1.0f32];
    let queues: Vec<_> = families
        .all()
        .into_iter()
        .map(|f| {
            vk::DeviceQueueCreateInfo::default()
                .queue_family_index(f)
                .queue_priorities(&priorities)
        })
        .collect();
    let names: Vec<*const i8> = extensions.iter().map(|(n, _)| n.as_ptr()).collect();
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
    let mut v13 = vk::PhysicalDeviceVulkan13Features::default().synchronization2(true);
    let mut info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_extension_names(&names)
        .push_next(&mut v12);
    if sync2 {
        info = info.push_next(&mut v13);
    }
    // SAFETY: every pointer in `info` refers to locals that outlive the call.
    unsafe { instance.create_device(physical, &info, None) }
}
