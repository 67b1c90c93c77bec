//! The deployment files (`deploy/`): the Kubernetes manifest passes `kubernetes-validate
//! --strict` (offline schemas of Kubernetes 1.37, PyPI, installed by
//! scripts/setup-test-env.sh into `.peers/venv`; `$MCPGW_KUBERNETES_VALIDATE` names another
//! copy), its configuration passes `mcpgw config check`, and the container build file agrees
//! with the repository and the manifest (stages, copied paths, user, port, entry point). No
//! container engine is needed.

use std::process::{Command, Stdio};

use crate::harness::*;

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The `mcpgw.toml` of the manifest's ConfigMap (a YAML block scalar, indented).
fn configmap_toml(manifest: &str) -> String {
    let mut lines = manifest.lines().skip_while(|l| l.trim() != "mcpgw.toml: |");
    lines.next().expect("the ConfigMap's mcpgw.toml");
    let mut toml = String::new();
    for line in lines {
        if line.trim().is_empty() {
            toml.push('\n');
            continue;
        }
        let Some(body) = line.strip_prefix("    ") else {
            break;
        };
        toml.push_str(body);
        toml.push('\n');
    }
    toml
}

#[test]
fn kubernetes_manifest_passes_strict_schema_validation() {
    let tool = std::env::var("MCPGW_KUBERNETES_VALIDATE")
        .unwrap_or_else(|_| venv_bin("kubernetes-validate"));
    let manifest = repo_root().join("deploy/kubernetes/mcpgw.yaml");
    let output = Command::new(&tool)
        .args(["--strict", "--kubernetes-version", "1.37.0"])
        .arg(&manifest)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| {
            panic!("cannot run {tool} ({e}): run scripts/setup-test-env.sh, or set MCPGW_KUBERNETES_VALIDATE")
        });
    let said = format!("{}{}", text(&output.stdout), text(&output.stderr));
    assert!(output.status.success(), "{said}");
    for kind in ["configmap", "secret", "deployment", "service"] {
        assert!(
            said.contains(&format!("passed for resource {kind}/")),
            "{kind}: {said}"
        );
    }
    // A manifest that breaks the schema is refused: the check can fail.
    let dir = tempfile::tempdir().expect("tempdir");
    let broken = dir.path().join("broken.yaml");
    std::fs::write(
        &broken,
        read("deploy/kubernetes/mcpgw.yaml")
            .replace("containerPort: 8931", "containerPort: \"eighty\""),
    )
    .expect("write");
    let refused = Command::new(&tool)
        .args(["--strict", "--kubernetes-version", "1.37.0"])
        .arg(&broken)
        .stdin(Stdio::null())
        .output()
        .expect("runs");
    assert!(!refused.status.success(), "{}", text(&refused.stdout));
}

#[test]
fn kubernetes_configuration_is_a_valid_mcpgw_configuration() {
    let manifest = read("deploy/kubernetes/mcpgw.yaml");
    let toml = configmap_toml(&manifest);
    assert!(
        toml.contains("[store]") && toml.contains("postgres://") && toml.contains("replicas = 3"),
        "{toml}"
    );
    assert!(
        manifest.contains("replicas: 3") && manifest.contains("MCPGW_REDIS_URL:"),
        "the Deployment's replicas match the configuration's, and the Secret has the Redis URL"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("mcpgw.toml");
    std::fs::write(&path, &toml).expect("write");
    // The Secret's variables, as the pod has them (`envFrom`).
    let checked = Command::new(mcpgw())
        .args(["config", "check", "--config"])
        .arg(&path)
        .env("MCPGW_REDIS_URL", "redis://:secret@redis.mcpgw.svc:6379/0")
        .env(
            "MCPGW_SECRET_KEY",
            "3q2+7wABAgMEBQYHCAkKCwwNDg8QERITFBUWFxgZGhs=",
        )
        .stdin(Stdio::null())
        .output()
        .expect("mcpgw runs");
    assert!(
        checked.status.success(),
        "{toml}\n{}{}",
        text(&checked.stdout),
        text(&checked.stderr)
    );
    // The probes, the port and the user agree with the image.
    let containerfile = read("deploy/Containerfile");
    assert!(manifest.contains("path: /healthz"), "readiness on /healthz");
    assert!(containerfile.contains("EXPOSE 8931") && manifest.contains("containerPort: 8931"));
    assert!(containerfile.contains("USER 10001:10001") && manifest.contains("runAsUser: 10001"));
    assert!(
        toml.contains("listen = \"0.0.0.0:8931\""),
        "the configured listener is the exposed port"
    );
}

#[test]
fn containerfile_stages_and_paths_agree_with_the_repository() {
    let containerfile = read("deploy/Containerfile");
    let mut stages = Vec::new();
    for line in containerfile.lines() {
        let words: Vec<&str> = line.split_whitespace().collect();
        match words.as_slice() {
            ["FROM", _image, "AS", name] => stages.push((*name).to_owned()),
            ["FROM", ..] => panic!("every stage is named: {line}"),
            ["COPY", from, ..] if from.starts_with("--from=") => {
                let stage = from.trim_start_matches("--from=");
                assert!(
                    stages.iter().any(|s| s == stage),
                    "COPY from an unknown stage: {line}"
                );
            }
            _ => {}
        }
    }
    assert_eq!(
        stages,
        ["build", "runtime"],
        "a build stage and a runtime stage"
    );
    // The build runs the project's own scripts and builds the real binary.
    assert!(containerfile.contains("cargo build --release --locked --bin mcpgw"));
    assert!(repo_root().join("scripts/fetch-models.sh").is_file());
    assert!(containerfile.contains("scripts/fetch-models.sh"));
    assert!(containerfile.contains("MCPGW_MODEL_DIR=/opt/mcpgw/models"));
    // The runtime is slim Debian, not root, and runs what was installed.
    let runtime = containerfile
        .split("AS runtime")
        .nth(1)
        .expect("runtime stage");
    assert!(containerfile.contains("debian:${DEBIAN_RELEASE}-slim AS runtime"));
    assert!(runtime.contains("COPY --from=build /usr/local/bin/mcpgw /usr/local/bin/mcpgw"));
    assert!(runtime.contains("ENTRYPOINT [\"/usr/local/bin/mcpgw\"]"));
    assert!(!runtime.contains("USER root") && runtime.contains("USER 10001"));
    // The CMD is a command line this binary accepts.
    let cmd = runtime
        .lines()
        .find_map(|l| l.strip_prefix("CMD "))
        .expect("CMD");
    let args: Vec<String> = serde_json::from_str(cmd).expect("CMD in exec form");
    assert_eq!(args[0], "serve");
    let help = Command::new(mcpgw())
        .args(["serve", "--help"])
        .output()
        .expect("mcpgw runs");
    let help = text(&help.stdout);
    for flag in args.iter().filter(|a| a.starts_with("--")) {
        assert!(help.contains(flag.as_str()), "serve has no {flag}: {help}");
    }
}
