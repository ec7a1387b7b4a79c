//! GPU families from recorded NVML answers (gpu/testdata/h200x2-nvml.json:
//! the 2x H200 host, transcribed from its nvidia-smi -q). promtool checks the
//! same output in tests/host/gpu_metrics.rs.

use super::*;
use crate::{
    gpu::{facts::RemappedRows, process::parse_cgroup, NvmlRecord},
    serve::metrics::{
        render,
        tests::{assert_declared, sample},
        OTHER_DEVICE,
    },
};

const H200X2: &str = include_str!("../gpu/testdata/h200x2-nvml.json");
const UUID0: &str = "GPU-acbd8c60-66a2-c5f7-967a-de51ca969cb3";

fn h200_text(change: impl FnOnce(&mut NvmlRecord)) -> String {
    let mut rec = NvmlRecord::from_json(H200X2).expect("recorded answers");
    change(&mut rec);
    let mut m = Model::default();
    let s = rec.last().expect("sample");
    m.add_gpus(&rec.status, s, &mut DeviceLabels::new(256));
    render(m, false).expect("encodes")
}

#[test]
fn recorded_nvml_h200_gpu_families_and_values() {
    let text = h200_text(|r| {
        let g = &mut r.samples[1].gpus[0];
        g.remapped_rows = Fact::Ok(RemappedRows {
            correctable: 2,
            uncorrectable: 1,
            pending: true,
            failure: false,
        });
    });
    let g0 = format!(r#"device="0000:00:06.0",gpu="0",uuid="{UUID0}""#);
    let want = [
        ("gpudirect_nvml_available".to_owned(), 1.0),
        ("gpudirect_nvml_device_errors".to_owned(), 0.0),
        (format!(r#"gpudirect_gpu_info{{{g0},name="NVIDIA H200"}}"#), 1.0),
        // nvidia-smi-q.txt: BAR1 Total 262144 MiB, Used 1 MiB.
        (format!("gpudirect_gpu_bar1_total_bytes{{{g0}}}"), 262144.0 * 1048576.0),
        (format!("gpudirect_gpu_bar1_used_bytes{{{g0}}}"), 1048576.0),
        (format!("gpudirect_gpu_pcie_link_gen_current{{{g0}}}"), 5.0),
        (format!("gpudirect_gpu_pcie_link_width_max{{{g0}}}"), 16.0),
        (format!("gpudirect_gpu_pcie_replays_total{{{g0}}}"), 1.0),
        (
            format!(r#"gpudirect_gpu_remapped_rows{{{g0},cause="correctable"}}"#),
            2.0,
        ),
        (format!("gpudirect_gpu_row_remap_pending{{{g0}}}"), 1.0),
        (format!("gpudirect_gpu_row_remap_failed{{{g0}}}"), 0.0),
        (
            format!(r#"gpudirect_gpu_ecc_errors_total{{{g0},scope="volatile",error="uncorrected"}}"#),
            0.0,
        ),
        (format!("gpudirect_gpu_ecc_enabled{{{g0}}}"), 1.0),
        (format!("gpudirect_gpu_persistence_mode{{{g0}}}"), 1.0),
        (format!("gpudirect_gpu_performance_state{{{g0}}}"), 0.0),
        (
            format!(r#"gpudirect_gpu_fact_unavailable{{{g0},fact="retired_pages_double_bit"}}"#),
            1.0,
        ),
        (
            r#"gpudirect_gpu_pcie_replays_total{device="0000:00:07.0",gpu="1",uuid="GPU-1059d476-8b2b-30f0-4f63-3d3ca6c66616"}"#
                .to_owned(),
            2.0,
        ),
    ];
    for (series, value) in want {
        assert_eq!(sample(&text, &series), Some(value), "{series} in\n{text}");
    }
    assert_declared(&text, "gpudirect_gpu_pcie_replays_total", "counter");
    assert_declared(&text, "gpudirect_gpu_bar1_used_bytes", "gauge");
    // Hopper has no page retirement: no retired-pages series, only the note.
    assert!(!text.contains("gpudirect_gpu_retired_pages{"), "{text}");
    for l in text.lines().filter(|l| l.starts_with("# HELP ")) {
        let words = l.split_whitespace().count();
        assert!(words > 3, "a family without help text: {l}");
    }
    assert!(!text.contains("pid"), "{text}");
}

#[test]
fn recorded_nvml_unavailable_exports_only_the_availability() {
    let text = h200_text(|r| {
        r.status = NvmlStatus::Unavailable {
            why: "the NVIDIA kernel driver is not loaded".into(),
        };
    });
    assert_eq!(sample(&text, "gpudirect_nvml_available"), Some(0.0));
    assert!(!text.contains("gpudirect_gpu_"), "{text}");
}

#[test]
fn recorded_nvml_gpu_past_the_device_cap_folds_like_other_devices() {
    let rec = NvmlRecord::from_json(H200X2).expect("recorded answers");
    let mut labels = DeviceLabels::new(1);
    let mut m = Model::default();
    m.add_gpus(&rec.status, rec.last().expect("sample"), &mut labels);
    let text = render(m, false).expect("encodes");
    assert!(
        text.contains(&format!(r#"device="{OTHER_DEVICE}",gpu="1""#)),
        "{text}"
    );
    assert_eq!(labels.folded(), 1);
}

#[test]
fn container_labels_are_capped_with_the_rest_folded_into_other() {
    // Real cgroup lines (sources in gpu/process_tests.rs): CRI-O on Kubic,
    // rootless podman, containerd on Bottlerocket.
    let lines = [
        "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod042efd86_1f3b_4f2f_8736_f31c58e95bbc.slice/crio-f33f47b0db740bb647cb3e7ac62d96c74966dbb99cbfaf4563bfd42d387e8b44.scope",
        "0::/user.slice/user-1001.slice/user@1001.service/user.slice/libpod-132ff0d72245e6f13a3bbc6cdc5376886897b60ac59eaa8dea1df7ab959cbf1c.scope",
        "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poddd1bf9d1_241d_47f5_8e25_12de83135812.slice/cri-containerd-f45298cd514d1930c4fe3afc4412e59547f7e3148fddd22ca33cefce046eb830.scope",
    ];
    let cs: Vec<_> = lines
        .iter()
        .map(|l| parse_cgroup(l).1.expect("container"))
        .collect();
    let mut l = ContainerLabels::new(2);
    assert_eq!(&*l.label(Some(&cs[0])), "f33f47b0db74");
    assert_eq!(&*l.label(Some(&cs[1])), "132ff0d72245");
    assert_eq!(&*l.label(Some(&cs[2])), OTHER_CONTAINER);
    assert_eq!(
        &*l.label(Some(&cs[2])),
        OTHER_CONTAINER,
        "folded stays folded"
    );
    assert_eq!(&*l.label(Some(&cs[0])), "f33f47b0db74", "admitted stays");
    assert_eq!(&*l.label(None), HOST_CONTAINER, "host never folds");
    assert_eq!(l.folded(), 1);
    let mut m = Model::default();
    m.add_container_folds(&l);
    let text = render(m, false).expect("encodes");
    assert_eq!(
        sample(&text, "gpudirect_containers_folded_total"),
        Some(1.0)
    );
}
