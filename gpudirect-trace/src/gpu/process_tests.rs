//! cgroup lines as real hosts print them. Where each came from:
//! - [NV] neuvector/neuvector share/system/cgroup_test.go: /proc/PID/cgroup of
//!   containers on real clusters (the test names say which: Debian and CentOS
//!   docker, RancherOS docker-in-docker, kubepods with docker and containerd
//!   1.2.13 / 1.4.4, Bottlerocket containerd, OpenShift CRI-O 1.17/1.19,
//!   openSUSE Kubic CRI-O 1.22 on cgroup v2).
//! - [RUNC] opencontainers/runc libcontainer/cgroups/systemd/v2.go, initPath:
//!   "an example of the final path in rootless" (a podman container).
//! - [HERE] this build machine's own /proc/self/cgroup (hybrid v1+v2, not in
//!   a container runtime's cgroup).
//!
//! Lines are quoted as printed; only the controllers list is shortened to the
//! lines that matter (every line of one process names the same path).

use std::{process::Command, time::Duration};

use super::*;

fn id_of(text: &str) -> Option<(&'static str, String)> {
    parse_cgroup(text).1.map(|c| (c.runtime, c.id))
}

/// A Kubernetes container as (runtime, short id, pod UID): what the
/// cluster cases must all get right at once.
fn pod_container(text: &str) -> (&'static str, String, Option<String>) {
    let c = parse_cgroup(text).1.expect("container");
    let short = c.short_id().to_owned();
    (c.runtime, short, c.pod)
}

fn pod(uid: &str) -> Option<String> {
    Some(uid.to_owned())
}

#[test]
fn cgroup_v1_docker_cgroupfs_and_systemd_drivers() {
    // [NV] TestDockerIDUbuntu (cgroupfs driver).
    let ubuntu = "12:name=systemd:/docker/31cb02944da7a12196a193cf0e0f6c226d7c453a1db62e65ba98287593a2ee30\n\
        4:memory:/docker/31cb02944da7a12196a193cf0e0f6c226d7c453a1db62e65ba98287593a2ee30\n";
    assert_eq!(
        id_of(ubuntu),
        Some((
            "docker",
            "31cb02944da7a12196a193cf0e0f6c226d7c453a1db62e65ba98287593a2ee30".into()
        ))
    );
    // [NV] TestDockerIDCentOS (systemd driver).
    let centos = "8:memory:/system.slice/docker-9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d.scope\n\
        1:name=systemd:/system.slice/docker-9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d.scope\n";
    let (path, c) = parse_cgroup(centos);
    let c = c.expect("container");
    assert_eq!((c.runtime, c.short_id()), ("docker", "9ec39b91f3d7"));
    assert_eq!(
        path.as_deref(),
        Some("/system.slice/docker-9ec39b91f3d70e1beff50a308f77067065ea6be0d91a3378375056cd4422cf3d.scope")
    );
    // [NV] TestDockerIDDebian: the container id is the whole path.
    let debian = "4:memory:/4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970\n";
    assert_eq!(
        id_of(debian).map(|(r, _)| r),
        Some("container"),
        "a bare id names no runtime"
    );
    assert_eq!(
        parse_cgroup(debian).0.as_deref(),
        Some("/4f797c539e6c745de61a93ca3ff892358ecbcaccd8414d5db545c38428142970")
    );
}

#[test]
fn docker_in_docker_gives_the_inner_container() {
    // [NV] TestDockerIDRancherOS.
    let t = "8:memory:/docker/a9a5ad238e59234193ee7ec3fcff5e735b3708ea1068826952255b69e3cfa413/docker/ec08435e04266c5ba381fccbb829f626d11d8ddf5f8f547263c7a2d79ab4787a\n";
    assert_eq!(
        id_of(t),
        Some((
            "docker",
            "ec08435e04266c5ba381fccbb829f626d11d8ddf5f8f547263c7a2d79ab4787a".into()
        ))
    );
}

#[test]
fn kubepods_cgroupfs_and_systemd_with_pod_uid() {
    // [NV] TestDockerIDKubepods (cgroupfs driver: bare id, runtime not named).
    let t = "10:memory:/kubepods/besteffort/pod74ba62da-1a3d-11e7-bb11-080027cb0e22/cb1eadb7abe3a6545e9856411207073277838e1bdc003337c2f8685faeedc32c\n";
    assert_eq!(
        pod_container(t),
        (
            "kubepods",
            "cb1eadb7abe3".into(),
            pod("74ba62da-1a3d-11e7-bb11-080027cb0e22")
        )
    );
    // [NV] TestDockerIDKubepods2 (systemd driver, docker runtime): the pod UID's
    // dashes are underscores in the slice name.
    let t = "8:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod045b1e35_7f13_11e7_ac42_0050568ffca0.slice/docker-b5b6f2da8008be266864f896f93789762b2ce50792114a5c5f2cc3315af0bc70.scope\n";
    assert_eq!(
        pod_container(t),
        (
            "docker",
            "b5b6f2da8008".into(),
            pod("045b1e35-7f13-11e7-ac42-0050568ffca0")
        )
    );
    // [NV] TestK8sProxyProcess: a process in a sub-cgroup of its container.
    let t = "10:memory:/kubepods/besteffort/podf8a694f2-7c08-11e9-98da-000c29077430/c04e0a88a1de067f25bece337d4dbb897396e0b623c2a65330850fc9823f1903/kube-proxy\n";
    assert_eq!(
        id_of(t).map(|(_, id)| id),
        Some("c04e0a88a1de067f25bece337d4dbb897396e0b623c2a65330850fc9823f1903".into())
    );
}

#[test]
fn containerd_v1_v2_and_the_kubelet_colon_form() {
    // [NV] TestK8sBottleRocket: hybrid host, the v2 line names the same scope.
    let t = "5:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poddd1bf9d1_241d_47f5_8e25_12de83135812.slice/cri-containerd-f45298cd514d1930c4fe3afc4412e59547f7e3148fddd22ca33cefce046eb830.scope\n\
        0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-poddd1bf9d1_241d_47f5_8e25_12de83135812.slice/cri-containerd-f45298cd514d1930c4fe3afc4412e59547f7e3148fddd22ca33cefce046eb830.scope\n";
    assert_eq!(
        pod_container(t),
        (
            "containerd",
            "f45298cd514d".into(),
            pod("dd1bf9d1-241d-47f5-8e25-12de83135812")
        )
    );
    let path = parse_cgroup(t).0.expect("path");
    assert!(path.starts_with("/kubepods.slice/"));
    // [NV] TestK8sContainerd_v1_4_4: `slice:cri-containerd:ID` inside the path.
    let t = "4:memory:/system.slice/containerd.service/kubepods-besteffort-pod2105e389_7471_476e_a50f_6074cef29bbd.slice:cri-containerd:d3d8ccf5cca91931c6285c1d7472c413dd5a7700fddc0aa9f89a9ac7008b003e\n";
    assert_eq!(
        pod_container(t),
        (
            "containerd",
            "d3d8ccf5cca9".into(),
            pod("2105e389-7471-476e-a50f-6074cef29bbd")
        )
    );
    // [NV] TestK8sContainerd_v1_2_13 (cgroupfs driver).
    let t = "9:memory:/kubepods/besteffort/poda36d0c1d-0b26-4451-8d80-9c195e004afa/5dd96d5394ca930a854a390ea46f7515a8bc930123eb3251ba20f2708a38fc61\n";
    assert_eq!(id_of(t).map(|(r, _)| r), Some("kubepods"));
}

#[test]
fn cri_o_v1_and_v2_and_conmon_is_not_the_container() {
    // [NV] TestK8sCrio_v1_19 (OpenShift 4.6, cgroup v1).
    let t = "3:memory:/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod8ca306fa_3c03_47fa_97dd_19979c345572.slice/crio-d6d725b909f37c3e232aadfbafa950a58bfe7baa579ba8c47a12be88bb921607.scope\n";
    assert_eq!(id_of(t).map(|(r, _)| r), Some("cri-o"));
    // [NV] TestCrio_Container_Cgroupv2 (openSUSE Kubic 1.22.1).
    let t = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod042efd86_1f3b_4f2f_8736_f31c58e95bbc.slice/crio-f33f47b0db740bb647cb3e7ac62d96c74966dbb99cbfaf4563bfd42d387e8b44.scope\n";
    assert_eq!(
        pod_container(t),
        (
            "cri-o",
            "f33f47b0db74".into(),
            pod("042efd86-1f3b-4f2f-8736-f31c58e95bbc")
        )
    );
    // CRI-O puts each container's monitor in crio-conmon-<container id>.scope
    // beside it (the Kubic line with that prefix): conmon is not in the container.
    let t = "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod042efd86_1f3b_4f2f_8736_f31c58e95bbc.slice/crio-conmon-f33f47b0db740bb647cb3e7ac62d96c74966dbb99cbfaf4563bfd42d387e8b44.scope\n";
    assert_eq!(id_of(t), None);
}

#[test]
fn rootless_podman_on_cgroup_v2() {
    // [RUNC] the path below /sys/fs/cgroup, as /proc/PID/cgroup prints it.
    let t = "0::/user.slice/user-1001.slice/user@1001.service/user.slice/libpod-132ff0d72245e6f13a3bbc6cdc5376886897b60ac59eaa8dea1df7ab959cbf1c.scope\n";
    assert_eq!(
        id_of(t),
        Some((
            "podman",
            "132ff0d72245e6f13a3bbc6cdc5376886897b60ac59eaa8dea1df7ab959cbf1c".into()
        ))
    );
    // podman's --cgroups=split puts the container's processes one level down.
    let split = t.replace(".scope\n", ".scope/container\n");
    assert_eq!(id_of(&split).map(|(r, _)| r), Some("podman"));
}

#[test]
fn host_processes_have_a_path_but_no_container() {
    // [HERE] hybrid hierarchy: v2 root, one v1 controller placed elsewhere.
    let here =
        "9:name=systemd:/\n8:pids:/\n4:memory:/process_api/6d977f11652a0ebebad6cda7a33f19a4\n\
        1:cpu:/\n0::/\n";
    assert_eq!(
        parse_cgroup(here),
        (
            Some("/process_api/6d977f11652a0ebebad6cda7a33f19a4".to_owned()),
            None
        )
    );
    // [NV] TestHostProcess / TestNsEnterProcess.
    assert_eq!(
        parse_cgroup("13:name=systemd:/\n12:pids:/\n1:cpuset:/\n"),
        (Some("/".to_owned()), None)
    );
    assert_eq!(
        parse_cgroup("13:name=systemd:/user/1000.user/c2.session\n12:pids:/\n").0,
        Some("/user/1000.user/c2.session".to_owned())
    );
    assert_eq!(parse_cgroup(""), (None, None));
    assert_eq!(parse_cgroup("garbage without colons\n"), (None, None));
}

#[test]
fn real_proc_own_pid_and_an_exited_pid() {
    let me = std::process::id();
    let info = read_proc(Path::new("/proc"), me);
    assert!(!info.exited);
    assert!(
        info.comm.as_deref().is_some_and(|c| !c.is_empty()),
        "{info:?}"
    );
    assert!(info.cgroup.is_some(), "{info:?}");
    // A child that has been reaped: its /proc entry is gone.
    let mut child = Command::new("true").spawn().expect("spawn true");
    let pid = child.id();
    child.wait().expect("wait");
    let gone = read_proc(Path::new("/proc"), pid);
    assert!(gone.exited && gone.comm.is_none(), "{gone:?}");
    let idle = read_proc(Path::new("/proc"), 0);
    assert_eq!(idle.comm.as_deref(), Some("[idle/irq]"));
}

#[test]
fn cache_is_bounded_counts_hits_and_rereads_after_ttl() {
    let me = std::process::id();
    let mut c = ProcCache::new("/proc", 2, Duration::from_secs(60));
    c.get(me);
    c.get(me);
    assert_eq!((c.stats.hits, c.stats.misses), (1, 1));
    // Pids that do not exist (above pid_max) are cached as exited too.
    for p in [u32::MAX - 1, u32::MAX - 2, u32::MAX - 3] {
        assert!(c.get(p).exited);
    }
    assert_eq!(c.len(), 2);
    assert_eq!(c.stats.evicted, 2);
    let mut stale = ProcCache::new("/proc", 8, Duration::ZERO);
    stale.get(me);
    stale.get(me);
    assert_eq!((stale.stats.hits, stale.stats.misses), (0, 2));
    assert_eq!(stale.len(), 1);
}
