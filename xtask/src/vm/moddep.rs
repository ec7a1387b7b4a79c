//! Kernel module dependency resolution from `modules.dep` (as written by `depmod`).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Result};

/// Parsed `modules.dep` + `modules.builtin` of one kernel.
#[derive(Debug, Default)]
pub struct ModDeps {
    /// Module name (normalised: `-` → `_`) → (relative path, dependency paths).
    by_name: BTreeMap<String, (String, Vec<String>)>,
    /// Path → module name, to follow dependencies given as paths.
    by_path: BTreeMap<String, String>,
    builtin: BTreeSet<String>,
}

/// `kernel/drivers/nvme/host/nvme-core.ko.xz` → `nvme_core`.
pub fn module_name(path: &str) -> String {
    let base = path.rsplit('/').next().unwrap_or(path);
    let stem = base.split(".ko").next().unwrap_or(base);
    stem.replace('-', "_")
}

impl ModDeps {
    pub fn parse(modules_dep: &str, modules_builtin: &str) -> Self {
        let mut deps = ModDeps::default();
        for line in modules_dep.lines() {
            let Some((path, rest)) = line.split_once(':') else {
                continue;
            };
            let path = path.trim().to_string();
            let requires: Vec<String> = rest.split_whitespace().map(str::to_string).collect();
            let name = module_name(&path);
            deps.by_path.insert(path.clone(), name.clone());
            deps.by_name.insert(name, (path, requires));
        }
        deps.builtin = modules_builtin
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(module_name)
            .collect();
        deps
    }

    pub fn is_builtin(&self, name: &str) -> bool {
        self.builtin.contains(&name.replace('-', "_"))
    }

    pub fn contains(&self, name: &str) -> bool {
        self.by_name.contains_key(&name.replace('-', "_"))
    }

    /// Paths of the modules needed for `wanted`, dependencies first, each once.
    /// Built-in modules are skipped; unknown ones are an error.
    pub fn load_order(&self, wanted: &[&str]) -> Result<Vec<String>> {
        let mut order = Vec::new();
        let mut seen = BTreeSet::new();
        for w in wanted {
            let name = w.replace('-', "_");
            if self.by_name.contains_key(&name) {
                self.visit(&name, &mut seen, &mut BTreeSet::new(), &mut order)?;
            } else if !self.builtin.contains(&name) {
                bail!("module {w} is neither in modules.dep nor built in");
            }
        }
        Ok(order)
    }

    fn visit(
        &self,
        name: &str,
        done: &mut BTreeSet<String>,
        stack: &mut BTreeSet<String>,
        order: &mut Vec<String>,
    ) -> Result<()> {
        if done.contains(name) {
            return Ok(());
        }
        if !stack.insert(name.to_string()) {
            bail!("dependency cycle through module {name}");
        }
        let Some((path, requires)) = self.by_name.get(name) else {
            bail!("module {name} missing from modules.dep");
        };
        for dep_path in requires {
            let dep = self
                .by_path
                .get(dep_path)
                .cloned()
                .unwrap_or_else(|| module_name(dep_path));
            self.visit(&dep, done, stack, order)?;
        }
        stack.remove(name);
        done.insert(name.to_string());
        order.push(path.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEP: &str = "\
kernel/drivers/nvme/host/nvme.ko.xz: kernel/drivers/nvme/host/nvme-core.ko.xz kernel/lib/crc64-rocksoft.ko.xz kernel/lib/crc64.ko.xz
kernel/drivers/nvme/host/nvme-core.ko.xz: kernel/lib/crc64-rocksoft.ko.xz kernel/lib/crc64.ko.xz
kernel/lib/crc64-rocksoft.ko.xz: kernel/lib/crc64.ko.xz
kernel/lib/crc64.ko.xz:
kernel/drivers/vfio/pci/vfio-pci.ko: kernel/drivers/vfio/pci/vfio-pci-core.ko kernel/drivers/vfio/vfio.ko kernel/virt/lib/irqbypass.ko
kernel/drivers/vfio/pci/vfio-pci-core.ko: kernel/drivers/vfio/vfio.ko kernel/virt/lib/irqbypass.ko
kernel/drivers/vfio/vfio.ko:
kernel/virt/lib/irqbypass.ko:
";

    #[test]
    fn dependencies_come_first_and_once() {
        let d = ModDeps::parse(DEP, "kernel/drivers/pci/pcieport.ko\n");
        let order = d.load_order(&["nvme", "nvme-core"]).expect("order");
        assert_eq!(
            order,
            vec![
                "kernel/lib/crc64.ko.xz",
                "kernel/lib/crc64-rocksoft.ko.xz",
                "kernel/drivers/nvme/host/nvme-core.ko.xz",
                "kernel/drivers/nvme/host/nvme.ko.xz",
            ]
        );
    }

    #[test]
    fn every_module_follows_its_dependencies() {
        let d = ModDeps::parse(DEP, "");
        let order = d.load_order(&["vfio_pci"]).expect("order");
        let pos = |p: &str| order.iter().position(|x| x.ends_with(p)).expect(p);
        assert!(pos("/vfio.ko") < pos("/vfio-pci-core.ko"));
        assert!(pos("/irqbypass.ko") < pos("/vfio-pci-core.ko"));
        assert!(pos("/vfio-pci-core.ko") < pos("/vfio-pci.ko"));
        assert_eq!(order.len(), 4);
    }

    #[test]
    fn builtin_is_skipped_unknown_is_error() {
        let d = ModDeps::parse(DEP, "kernel/drivers/pci/pcieport.ko\n");
        assert!(d.load_order(&["pcieport"]).expect("builtin").is_empty());
        assert!(d.load_order(&["no_such_module"]).is_err());
        assert_eq!(module_name("a/b/nvme-core.ko.zst"), "nvme_core");
    }
}
