//! A real Prometheus and Alertmanager (the Debian packages' binaries) on
//! the host's loopback, each with a scratch directory, for the fleet
//! scenarios (fleet.rs): Prometheus scrapes the VMs' exporters through
//! their port forwards, evaluates the project's own rules file and sends
//! what fires to the Alertmanager, whose API the check reads. Both are this
//! process's children, killed when the [`Stack`] is dropped.

use std::{
    io::{Read, Write},
    net::{SocketAddr, TcpListener, TcpStream},
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{bail, Context, Result};

use super::Missing;

pub const PROMETHEUS: &str = "/usr/bin/prometheus";
pub const ALERTMANAGER: &str = "/usr/bin/prometheus-alertmanager";

/// The scrape job's name: the rules' exporter-down alerts match on it
/// (deploy/prometheus/gpudirect-trace.rules.yml), as a real deployment's would.
pub const JOB: &str = "gpudirect-trace";

/// One exporter to scrape, labelled `node` as the rules expect a fleet's
/// scrape config to do (the alerts name the node by it).
pub struct Target {
    pub node: String,
    pub addr: SocketAddr,
}

/// A free port on the host's loopback (the kernel's pick; free again when
/// this returns, so a race with another program is possible but rare).
pub fn free_port() -> Result<u16> {
    let l = TcpListener::bind("127.0.0.1:0").context("binding an ephemeral loopback port")?;
    Ok(l.local_addr()?.port())
}

pub struct Stack {
    prometheus: Child,
    alertmanager: Child,
    pub prometheus_addr: SocketAddr,
    pub alertmanager_addr: SocketAddr,
    dir: PathBuf,
}

impl Drop for Stack {
    fn drop(&mut self) {
        for c in [&mut self.prometheus, &mut self.alertmanager] {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The Prometheus configuration: `rules` loaded as is, alerts to
/// `alertmanager`, scrapes and evaluations every second (the test waits on
/// both). A scrape of `serve` in a TCG guest took at most 12 ms with three
/// VMs on 2 cores (fleet.rs logs the slowest), far inside the 1 s timeout.
pub fn prometheus_config(rules: &Path, alertmanager: SocketAddr, targets: &[Target]) -> String {
    let mut s = format!(
        "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n\
         rule_files:\n  - {}\n\
         alerting:\n  alertmanagers:\n    - static_configs:\n        - targets: ['{alertmanager}']\n\
         scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n",
        rules.display()
    );
    for t in targets {
        s.push_str(&format!(
            "      - targets: ['{}']\n        labels:\n          node: {}\n",
            t.addr, t.node
        ));
    }
    s
}

/// An Alertmanager that only keeps what it is sent (the check reads its
/// API): one receiver with nowhere to send to.
const ALERTMANAGER_CONFIG: &str = "route:\n  receiver: test\nreceivers:\n  - name: test\n";

/// The last lines of a child's log, for a failure message.
fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(5)..].join("\n")
}

/// Starts both on loopback ports and waits until they say they are ready.
/// [`Missing`] (a counted skip) when either binary is not installed.
pub fn start(rules: &Path, targets: &[Target]) -> Result<Stack> {
    for (bin, pkg) in [
        (PROMETHEUS, "prometheus"),
        (ALERTMANAGER, "prometheus-alertmanager"),
    ] {
        if !Path::new(bin).exists() {
            return Err(Missing(format!(
                "{bin} missing (Debian package {pkg}; cargo xtask bootstrap installs it)"
            ))
            .into());
        }
    }
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let dir = std::env::temp_dir().join(format!("gdt-fleet-{}-{nanos}", std::process::id()));
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let log = |name: &str| -> Result<Stdio> {
        Ok(std::fs::File::create(dir.join(name))
            .with_context(|| format!("creating {name}"))?
            .into())
    };

    let alertmanager_addr: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let am_config = dir.join("alertmanager.yml");
    std::fs::write(&am_config, ALERTMANAGER_CONFIG)?;
    let mut alertmanager = Command::new(ALERTMANAGER)
        .arg(format!("--config.file={}", am_config.display()))
        .arg(format!("--storage.path={}", dir.join("am-data").display()))
        .arg(format!("--web.listen-address={alertmanager_addr}"))
        // Empty: no cluster gossip (by default it listens on 0.0.0.0:9094).
        .arg("--cluster.listen-address=")
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(log("alertmanager.log")?)
        .spawn()
        .context("starting prometheus-alertmanager")?;

    let prometheus_addr: SocketAddr = match free_port() {
        Ok(p) => format!("127.0.0.1:{p}").parse()?,
        Err(e) => {
            let _ = alertmanager.kill();
            return Err(e);
        }
    };
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        prometheus_config(rules, alertmanager_addr, targets),
    )?;
    let prometheus = Command::new(PROMETHEUS)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("prom-data").display()
        ))
        .arg(format!("--web.listen-address={prometheus_addr}"))
        .arg("--log.level=warn")
        .stdout(Stdio::null())
        .stderr(log("prometheus.log")?)
        .spawn();
    let prometheus = match prometheus {
        Ok(p) => p,
        Err(e) => {
            let _ = alertmanager.kill();
            let _ = alertmanager.wait();
            return Err(e).context("starting prometheus");
        }
    };
    let mut stack = Stack {
        prometheus,
        alertmanager,
        prometheus_addr,
        alertmanager_addr,
        dir,
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    for (name, addr) in [
        ("prometheus", prometheus_addr),
        ("alertmanager", alertmanager_addr),
    ] {
        loop {
            if matches!(http_get(addr, "/-/ready"), Ok((200, _))) {
                break;
            }
            let exited = match name {
                "prometheus" => stack.prometheus.try_wait()?,
                _ => stack.alertmanager.try_wait()?,
            };
            if exited.is_some() || Instant::now() >= deadline {
                bail!(
                    "{name} on {addr} never got ready ({}): {}",
                    exited.map_or("timed out".into(), |s| s.to_string()),
                    log_tail(&stack.dir.join(format!("{name}.log")))
                );
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    Ok(stack)
}

impl Stack {
    /// An instant query: (labels, value) per series.
    pub fn query(&self, promql: &str) -> Result<Vec<(serde_json::Value, f64)>> {
        let target = format!("/api/v1/query?query={}", url_encode(promql));
        let (status, body) = http_get(self.prometheus_addr, &target)?;
        if status != 200 {
            bail!("prometheus: {promql}: HTTP {status}: {body}");
        }
        let doc: serde_json::Value =
            serde_json::from_str(&body).context("prometheus' answer is not JSON")?;
        let result = doc["data"]["result"]
            .as_array()
            .with_context(|| format!("no vector result: {body}"))?;
        result
            .iter()
            .map(|r| {
                let v = r["value"][1].as_str().context("value")?.parse()?;
                Ok((r["metric"].clone(), v))
            })
            .collect()
    }

    /// The alerts the Alertmanager holds (API v2: labels, status.state,
    /// startsAt ...), active or not.
    pub fn alerts(&self) -> Result<Vec<serde_json::Value>> {
        let (status, body) = http_get(self.alertmanager_addr, "/api/v2/alerts")?;
        if status != 200 {
            bail!("alertmanager: HTTP {status}: {body}");
        }
        let doc: serde_json::Value =
            serde_json::from_str(&body).context("alertmanager's answer is not JSON")?;
        doc.as_array()
            .cloned()
            .with_context(|| format!("not a list of alerts: {body}"))
    }

    /// Waits until `ok` holds for the answer of `promql`, up to `limit`.
    pub fn wait_query(
        &self,
        promql: &str,
        limit: Duration,
        ok: impl Fn(&[(serde_json::Value, f64)]) -> bool,
    ) -> Result<()> {
        let deadline = Instant::now() + limit;
        let mut last = String::from("no answer");
        while Instant::now() < deadline {
            match self.query(promql) {
                Ok(r) if ok(&r) => return Ok(()),
                Ok(r) => last = format!("{r:?}"),
                Err(e) => last = format!("{e:#}"),
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        bail!(
            "{promql}: not as wanted within {}s; last answer {last}",
            limit.as_secs()
        )
    }

    /// Prometheus' log so far (warnings: rule or notification errors).
    pub fn prometheus_log(&self) -> String {
        log_tail(&self.dir.join("prometheus.log"))
    }
}

/// A plain HTTP/1.0 GET (both servers answer it; xtask has no HTTP client).
pub fn http_get(addr: SocketAddr, target: &str) -> Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5))
        .with_context(|| format!("connecting to {addr}"))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "GET {target} HTTP/1.0\r\nHost: {addr}\r\nAccept: application/json\r\n\r\n"
    )?;
    let mut raw = String::new();
    s.read_to_string(&mut raw)?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("no HTTP status in {head:?}"))?;
    Ok((status, body.to_owned()))
}

fn url_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_config_loads_the_rules_and_labels_each_node() {
        let targets = [
            Target {
                node: "node-a".into(),
                addr: "127.0.0.1:4001".parse().expect("addr"),
            },
            Target {
                node: "node-b".into(),
                addr: "127.0.0.1:4002".parse().expect("addr"),
            },
        ];
        let c = prometheus_config(
            Path::new("/r/rules.yml"),
            "127.0.0.1:9093".parse().expect("addr"),
            &targets,
        );
        assert!(c.contains("rule_files:\n  - /r/rules.yml\n"), "{c}");
        assert!(c.contains("job_name: gpudirect-trace"), "{c}");
        assert!(
            c.contains("- targets: ['127.0.0.1:4002']\n        labels:\n          node: node-b\n")
        );
        assert!(c.contains("targets: ['127.0.0.1:9093']"));
        assert_eq!(url_encode("up{a=\"b\"}"), "up%7Ba%3D%22b%22%7D");
    }
}
