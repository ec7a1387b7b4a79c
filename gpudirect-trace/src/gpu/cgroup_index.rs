//! cgroup v2 ids to paths: what a process-exit record's cgroup id
//! (bpf_get_current_cgroup_id, the cgroup directory's inode number) says
//! about the container an exited process ran in, when /proc no longer has
//! it. The index is one walk of the cgroup v2 hierarchy, made again on a
//! miss at most every `REBUILD_EVERY` and bounded in size.

use std::{
    collections::HashMap,
    os::unix::fs::MetadataExt as _,
    path::{Path, PathBuf},
    time::{Duration, Instant},
};

const REBUILD_EVERY: Duration = Duration::from_secs(10);
/// Directories kept (a Kubernetes node has thousands, not hundreds of
/// thousands) and the deepest path walked.
const MAX_DIRS: usize = 100_000;
const MAX_DEPTH: usize = 16;

pub struct CgroupIndex {
    root: PathBuf,
    by_id: HashMap<u64, String>,
    built: Option<Instant>,
}

impl CgroupIndex {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self {
            root: root.into(),
            by_id: HashMap::new(),
            built: None,
        }
    }

    /// The host's v2 hierarchy: /sys/fs/cgroup, or its `unified` mount on a
    /// hybrid (v1 + v2) host.
    pub fn host() -> Self {
        let hybrid = Path::new("/sys/fs/cgroup/unified");
        Self::new(if hybrid.is_dir() {
            hybrid
        } else {
            Path::new("/sys/fs/cgroup")
        })
    }

    /// The path (from the hierarchy's root, `/` for the root) of cgroup
    /// `id`; None for 0 or an id the hierarchy does not hold.
    pub fn path(&mut self, id: u64) -> Option<String> {
        if id == 0 {
            return None;
        }
        if !self.by_id.contains_key(&id) && self.built.is_none_or(|t| t.elapsed() >= REBUILD_EVERY)
        {
            self.rebuild();
        }
        self.by_id.get(&id).cloned()
    }

    fn rebuild(&mut self) {
        self.built = Some(Instant::now());
        self.by_id.clear();
        let mut stack: Vec<(PathBuf, String, usize)> = vec![(self.root.clone(), "/".into(), 0)];
        while let Some((dir, rel, depth)) = stack.pop() {
            if self.by_id.len() >= MAX_DIRS {
                break;
            }
            let Ok(meta) = std::fs::symlink_metadata(&dir) else {
                continue;
            };
            if !meta.is_dir() {
                continue;
            }
            self.by_id.insert(meta.ino(), rel.clone());
            if depth >= MAX_DEPTH {
                continue;
            }
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in rd.filter_map(Result::ok) {
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    let name = e.file_name().to_string_lossy().into_owned();
                    let child = if rel == "/" {
                        format!("/{name}")
                    } else {
                        format!("{rel}/{name}")
                    };
                    stack.push((e.path(), child, depth + 1));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_the_directories_inodes_and_unknown_ids_are_none() {
        let root = std::env::temp_dir().join(format!("gdt-cg-{}", std::process::id()));
        let id = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef";
        let leaf = root.join(format!("system.slice/docker-{id}.scope"));
        std::fs::create_dir_all(&leaf).expect("mkdir");
        let ino = std::fs::metadata(&leaf).expect("stat").ino();
        let mut ix = CgroupIndex::new(&root);
        let path = ix.path(ino);
        assert_eq!(
            path.as_deref(),
            Some(format!("/system.slice/docker-{id}.scope").as_str())
        );
        let c =
            super::super::process::container_of(path.as_deref().expect("indexed")).expect("docker");
        assert_eq!((c.runtime, c.id.as_str()), ("docker", id));
        assert_eq!(ix.path(0), None);
        assert_eq!(ix.path(u64::MAX), None);
        let _ = std::fs::remove_dir_all(&root);
    }
}
