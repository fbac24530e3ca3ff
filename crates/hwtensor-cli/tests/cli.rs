//! The `hwtensor` command, run as users run it.

use std::process::Command;

fn hwtensor(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_hwtensor"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn probe_names_every_backing_and_says_why_one_is_missing() {
    let out = hwtensor(&["probe"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    for name in ["mem", "shm", "dmabuf", "gpu", "cuda"] {
        assert!(
            text.lines().any(|l| l.starts_with(name)),
            "{name} missing from:\n{text}"
        );
    }
    // CUDA is there (a GPU machine) or says why not.
    assert!(
        text.lines().any(|l| l.starts_with("cuda")
            && (l.split_whitespace().nth(1) == Some("yes") || l.contains("no "))),
        "{text}"
    );
}

#[cfg(target_os = "linux")]
#[test]
fn probe_shows_the_request_and_names_the_adapters_when_none_matches() {
    let out = Command::new(env!("CARGO_BIN_EXE_hwtensor"))
        .arg("probe")
        .env("HWTENSOR_GPU_ADAPTER", "no-such-gpu-anywhere")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("requested: HWTENSOR_GPU_ADAPTER=no-such-gpu-anywhere"),
        "{text}"
    );
    let device = text
        .lines()
        .find(|l| l.starts_with("process device"))
        .unwrap_or_default();
    assert!(
        device.contains("selects none of the adapters here"),
        "{text}"
    );
}

/// The probe's "process device" line, run with `env`.
#[cfg(target_os = "linux")]
fn process_device_line(env: &[(&str, &str)]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_hwtensor"))
        .arg("probe")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{env:?}: {stderr}");
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .find(|l| l.starts_with("process device"))
        .unwrap_or_default()
        .to_owned()
}

#[cfg(target_os = "linux")]
#[test]
fn a_debug_request_without_the_validation_layer_installed_still_makes_the_device() {
    // An empty layer folder hides the layer as a machine without it (the GPU machine) lacks
    // it: the device was made with no VK_EXT_debug_utils, and asking it for a messenger
    // aborted the process.
    let no_layers = std::env::temp_dir().join(format!("hwtensor-no-layers-{}", std::process::id()));
    std::fs::create_dir_all(&no_layers).unwrap();
    let path = no_layers.to_str().unwrap();
    let plain = process_device_line(&[]);
    let debug = process_device_line(&[("HWTENSOR_GPU_DEBUG", "1"), ("VK_LAYER_PATH", path)]);
    let _ = std::fs::remove_dir(&no_layers);
    assert_eq!(debug, plain, "the same device, validation or not");
}

#[test]
fn probe_json_is_machine_readable() {
    let out = hwtensor(&["probe", "--json"]);
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["schema"], 1, "the report says which layout it has");
    let backings = v["backings"].as_array().unwrap();
    assert_eq!(backings.len(), 5);
    assert_eq!(backings[0]["memory"], "mem");
    assert_eq!(backings[0]["available"], true);
}

#[test]
#[cfg(target_os = "linux")]
fn the_demo_streams_frames_between_two_processes_and_verifies_both_directions() {
    let out = hwtensor(&["demo", "--frames", "7"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("consumer: 7 frame(s) mapped without a copy, every pixel verified"),
        "{stdout}"
    );
    assert!(
        stdout.contains("every acknowledgement verified"),
        "{stdout}"
    );
}

#[test]
fn a_bad_argument_is_one_clear_line_and_a_failure_status() {
    let out = hwtensor(&["demo", "--frames", "lots"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("invalid value"));
}

#[test]
fn a_demo_of_no_frames_is_refused_not_reported_as_a_success() {
    let out = hwtensor(&["demo", "--frames", "0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("invalid value '0'") && err.contains("--frames"),
        "{err}"
    );
}

#[test]
fn a_consumer_whose_producer_is_gone_fails_with_a_clear_error() {
    let out = hwtensor(&["demo-consumer", "--socket", "hwtensor-test-nobody-listens"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("error: "), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

#[test]
#[cfg(target_os = "linux")]
fn the_gpu_demo_hands_gpu_tensors_between_two_processes() {
    let out = hwtensor(&["demo", "--gpu", "--frames", "4"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let required = std::env::var("HWTENSOR_TEST_REQUIRE_GPU").is_ok_and(|v| v == "1");
    if !out.status.success() && stderr.contains("GPU") && !required {
        eprintln!("SKIPPED: the_gpu_demo_hands_gpu_tensors_between_two_processes - {stderr}");
        return;
    }
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(
        stdout.contains("4 frame(s) imported on the GPU without a copy"),
        "{stdout}"
    );
    assert!(
        stdout.contains("every acknowledgement verified"),
        "{stdout}"
    );
}

#[test]
#[cfg(windows)]
fn probe_on_windows_names_the_d3d11_device_and_what_its_fence_is() {
    let out = hwtensor(&["probe"]);
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("GPU adapters (DXGI):"), "{text}");
    assert!(text.contains("process device: "), "{text}");
    assert!(text.contains("timeline fence: "), "{text}");
}

#[test]
#[cfg(windows)]
fn the_demo_on_windows_hands_shared_memory_frames_over_a_named_pipe() {
    let out = hwtensor(&["demo", "--frames", "5"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("every acknowledgement verified"), "{text}");
}

#[test]
#[cfg(windows)]
fn the_gpu_demo_on_windows_is_one_clear_line_saying_why_not() {
    let out = hwtensor(&["demo", "--gpu"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.starts_with("error: ") && err.contains("share_gpu"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
