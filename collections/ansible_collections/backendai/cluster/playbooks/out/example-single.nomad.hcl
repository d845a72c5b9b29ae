job "example-single" {
  type        = "batch"
  datacenters = ["dc1"]

  ui {
    description = "Backend.AI cluster session: 3 containers (main1, sub1, sub2), single-node on 1 node, image `python:3.11-slim`. One task group per container, named by its hostname; `ssh sub1` works from main1 with the session keypair from the Nomad variable `nomad/jobs/example-single`."

    link {
      label = "Backend.AI cluster sessions"
      url   = "https://docs.backend.ai/en/latest/concepts/networking.html"
    }
  }

  meta {
    BACKENDAI_CLUSTER_HOSTS    = "main1,sub1,sub2"
    BACKENDAI_CLUSTER_MODE     = "single-node"
    BACKENDAI_CLUSTER_REPLICAS = "main:1,sub:2"
    BACKENDAI_CLUSTER_SIZE     = "3"
    BACKENDAI_ENTRYPOINT       = <<EOT
#!/bin/sh
set -eu
S=$${NOMAD_SECRETS_DIR:-/secrets}/backendai L=$${NOMAD_TASK_DIR:-/local}/backendai P=$BACKENDAI_SSH_PORT
command -v sshd >/dev/null 2>&1 || [ -x /usr/sbin/sshd ] || {
  echo "backendai: sshd not found; cluster sessions need OpenSSH server in the image" >&2; exit 78; }
i=0
while [ "$(grep -c . $L/peers 2>/dev/null || true)" -lt "$BACKENDAI_CLUSTER_SIZE" ]; do
  i=$((i+1)); [ $i -le 1200 ] || { echo "backendai: peers not all registered after 600s" >&2; exit 75; }
  sleep 0.5
done
cat $L/peers >> /etc/hosts
mkdir -p -m 700 /root/.ssh /run/sshd
install -m 600 $S/id /root/.ssh/id_backendai
cat $S/id.pub >> /root/.ssh/authorized_keys
echo "* $(cut -d' ' -f1,2 $S/id.pub)" > /root/.ssh/known_hosts_backendai
{ echo "Host $(echo "$BACKENDAI_CLUSTER_HOSTS" | tr , ' ')"; echo " Port $P"
  echo " IdentityFile /root/.ssh/id_backendai"; echo " StrictHostKeyChecking yes"
  echo " UserKnownHostsFile /root/.ssh/known_hosts_backendai"; } >> /root/.ssh/config
env | grep -E '^(BACKENDAI_|WORLD_|RANK=|LOCAL_RANK=|MASTER_|TF_CONFIG=)' > /root/.ssh/environment || true
D="$(command -v sshd || echo /usr/sbin/sshd) -p $P -h /root/.ssh/id_backendai"
D="$D -o PermitRootLogin=prohibit-password -o PasswordAuthentication=no -o PermitUserEnvironment=yes"
if [ $# -eq 0 ]; then exec $D -D -e; fi
$D
exec "$@"
EOT
    BACKENDAI_SESSION_ID       = "1933e6fb-2d5a-5a0b-8c71-85aec70c46f4"
    BACKENDAI_SSH_PORT         = "2200"
    BACKENDAI_TF_WORKERS       = "[\"main1:12345\", \"sub1:12345\", \"sub2:12345\"]"
    MASTER_ADDR                = "main1"
    MASTER_PORT                = "12345"
    WORLD_SIZE                 = "3"
    backendai_cluster_service  = "bai-example-single-96a679c3"
    backendai_cluster_session  = "example-single"
    backendai_secrets_backend  = "nomad-variables"
  }

  group "main1" {
    count = 1

    meta {
      BACKENDAI_CLUSTER_ROLE = "main"
      BACKENDAI_CLUSTER_IDX  = "1"
      backendai_agent        = "agent-a"
    }

    constraint {
      attribute = "$${node.unique.name}"
      operator  = "="
      value     = "agent-a"
    }

    network {
      mode     = "bridge"
      hostname = "main1"

      port "ssh" {
        to = 2200
      }
    }

    service {
      name         = "bai-example-single-96a679c3"
      provider     = "nomad"
      address_mode = "alloc"
      port         = "2200"
      tags         = ["main1", "role-main"]
    }

    restart {
      attempts = 2
      interval = "5m"
      delay    = "5s"
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "kernel" {
      driver       = "docker"
      kill_timeout = "10s"

      config {
        image      = "python:3.11-slim"
        entrypoint = ["/bin/sh", "/local/backendai/entrypoint.sh"]
        args       = ["python3", "-c", "import os; print(os.environ['BACKENDAI_CLUSTER_HOST'], 'of', os.environ['BACKENDAI_CLUSTER_HOSTS'])"]
      }

      env {
        BACKENDAI_CLUSTER_HOST       = "main1"
        BACKENDAI_CLUSTER_HOSTS      = "$${NOMAD_META_BACKENDAI_CLUSTER_HOSTS}"
        BACKENDAI_CLUSTER_IDX        = "1"
        BACKENDAI_CLUSTER_LOCAL_RANK = "0"
        BACKENDAI_CLUSTER_MODE       = "$${NOMAD_META_BACKENDAI_CLUSTER_MODE}"
        BACKENDAI_CLUSTER_REPLICAS   = "$${NOMAD_META_BACKENDAI_CLUSTER_REPLICAS}"
        BACKENDAI_CLUSTER_ROLE       = "main"
        BACKENDAI_CLUSTER_SIZE       = "$${NOMAD_META_BACKENDAI_CLUSTER_SIZE}"
        BACKENDAI_KERNEL_ID          = "1933e6fb-2d5a-5a0b-8c71-85aec70c46f4"
        BACKENDAI_SESSION_ID         = "$${NOMAD_META_BACKENDAI_SESSION_ID}"
        BACKENDAI_SSH_PORT           = "$${NOMAD_META_BACKENDAI_SSH_PORT}"
        LOCAL_RANK                   = "0"
        MASTER_ADDR                  = "$${NOMAD_META_MASTER_ADDR}"
        MASTER_PORT                  = "$${NOMAD_META_MASTER_PORT}"
        PROJECT                      = "example"
        RANK                         = "0"
        TF_CONFIG                    = "{\"cluster\": {\"worker\": $${NOMAD_META_BACKENDAI_TF_WORKERS}}, \"task\": {\"type\": \"worker\", \"index\": 0}}"
        WORLD_RANK                   = "0"
        WORLD_SIZE                   = "$${NOMAD_META_WORLD_SIZE}"
      }

      resources {
        cpu    = 1000
        memory = 2048
      }

      template {
        destination = "secrets/backendai/id"
        perms       = "0600"
        change_mode = "noop"
        data        = "{{ with nomadVar \"nomad/jobs/example-single\" }}{{ .ssh_private_key }}{{ end }}"
      }

      template {
        destination = "secrets/backendai/id.pub"
        perms       = "0644"
        change_mode = "noop"
        data        = "{{ with nomadVar \"nomad/jobs/example-single\" }}{{ .ssh_public_key }}{{ end }}"
      }

      template {
        destination = "local/backendai/peers"
        change_mode = "noop"
        data        = "{{ range nomadService \"bai-example-single-96a679c3\" }}{{ .Address }} {{ index .Tags 0 }}\n{{ end }}"
      }

      template {
        destination = "local/backendai/entrypoint.sh"
        perms       = "0755"
        change_mode = "noop"
        data        = "{{ env \"NOMAD_META_BACKENDAI_ENTRYPOINT\" }}"
      }
    }
  }

  group "sub1" {
    count = 1

    meta {
      BACKENDAI_CLUSTER_ROLE = "sub"
      BACKENDAI_CLUSTER_IDX  = "1"
      backendai_agent        = "agent-a"
    }

    constraint {
      attribute = "$${node.unique.name}"
      operator  = "="
      value     = "agent-a"
    }

    network {
      mode     = "bridge"
      hostname = "sub1"
    }

    service {
      name         = "bai-example-single-96a679c3"
      provider     = "nomad"
      address_mode = "alloc"
      port         = "2200"
      tags         = ["sub1", "role-sub"]
    }

    restart {
      attempts = 2
      interval = "5m"
      delay    = "5s"
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "kernel" {
      driver       = "docker"
      kill_timeout = "10s"

      config {
        image      = "python:3.11-slim"
        entrypoint = ["/bin/sh", "/local/backendai/entrypoint.sh"]
        args       = ["python3", "-c", "import os; print(os.environ['BACKENDAI_CLUSTER_HOST'], 'of', os.environ['BACKENDAI_CLUSTER_HOSTS'])"]
      }

      env {
        BACKENDAI_CLUSTER_HOST       = "sub1"
        BACKENDAI_CLUSTER_HOSTS      = "$${NOMAD_META_BACKENDAI_CLUSTER_HOSTS}"
        BACKENDAI_CLUSTER_IDX        = "1"
        BACKENDAI_CLUSTER_LOCAL_RANK = "1"
        BACKENDAI_CLUSTER_MODE       = "$${NOMAD_META_BACKENDAI_CLUSTER_MODE}"
        BACKENDAI_CLUSTER_REPLICAS   = "$${NOMAD_META_BACKENDAI_CLUSTER_REPLICAS}"
        BACKENDAI_CLUSTER_ROLE       = "sub"
        BACKENDAI_CLUSTER_SIZE       = "$${NOMAD_META_BACKENDAI_CLUSTER_SIZE}"
        BACKENDAI_KERNEL_ID          = "bcdc3286-db93-530a-a61c-c317cb719a9f"
        BACKENDAI_SESSION_ID         = "$${NOMAD_META_BACKENDAI_SESSION_ID}"
        BACKENDAI_SSH_PORT           = "$${NOMAD_META_BACKENDAI_SSH_PORT}"
        LOCAL_RANK                   = "1"
        MASTER_ADDR                  = "$${NOMAD_META_MASTER_ADDR}"
        MASTER_PORT                  = "$${NOMAD_META_MASTER_PORT}"
        PROJECT                      = "example"
        RANK                         = "1"
        TF_CONFIG                    = "{\"cluster\": {\"worker\": $${NOMAD_META_BACKENDAI_TF_WORKERS}}, \"task\": {\"type\": \"worker\", \"index\": 1}}"
        WORLD_RANK                   = "1"
        WORLD_SIZE                   = "$${NOMAD_META_WORLD_SIZE}"
      }

      resources {
        cpu    = 1000
        memory = 2048
      }

      template {
        destination = "secrets/backendai/id"
        perms       = "0600"
        change_mode = "noop"
        data        = "{{ with nomadVar \"nomad/jobs/example-single\" }}{{ .ssh_private_key }}{{ end }}"
      }

      template {
        destination = "secrets/backendai/id.pub"
        perms       = "0644"
        change_mode = "noop"
        data        = "{{ with nomadVar \"nomad/jobs/example-single\" }}{{ .ssh_public_key }}{{ end }}"
      }

      template {
        destination = "local/backendai/peers"
        change_mode = "noop"
        data        = "{{ range nomadService \"bai-example-single-96a679c3\" }}{{ .Address }} {{ index .Tags 0 }}\n{{ end }}"
      }

      template {
        destination = "local/backendai/entrypoint.sh"
        perms       = "0755"
        change_mode = "noop"
        data        = "{{ env \"NOMAD_META_BACKENDAI_ENTRYPOINT\" }}"
      }
    }
  }

  group "sub2" {
    count = 1

    meta {
      BACKENDAI_CLUSTER_ROLE = "sub"
      BACKENDAI_CLUSTER_IDX  = "2"
      backendai_agent        = "agent-a"
    }

    constraint {
      attribute = "$${node.unique.name}"
      operator  = "="
      value     = "agent-a"
    }

    network {
      mode     = "bridge"
      hostname = "sub2"
    }

    service {
      name         = "bai-example-single-96a679c3"
      provider     = "nomad"
      address_mode = "alloc"
      port         = "2200"
      tags         = ["sub2", "role-sub"]
    }

    restart {
      attempts = 2
      interval = "5m"
      delay    = "5s"
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    task "kernel" {
      driver       = "docker"
      kill_timeout = "10s"

      config {
        image      = "python:3.11-slim"
        entrypoint = ["/bin/sh", "/local/backendai/entrypoint.sh"]
        args       = ["python3", "-c", "import os; print(os.environ['BACKENDAI_CLUSTER_HOST'], 'of', os.environ['BACKENDAI_CLUSTER_HOSTS'])"]
      }

      env {
        BACKENDAI_CLUSTER_HOST       = "sub2"
        BACKENDAI_CLUSTER_HOSTS      = "$${NOMAD_META_BACKENDAI_CLUSTER_HOSTS}"
        BACKENDAI_CLUSTER_IDX        = "2"
        BACKENDAI_CLUSTER_LOCAL_RANK = "2"
        BACKENDAI_CLUSTER_MODE       = "$${NOMAD_META_BACKENDAI_CLUSTER_MODE}"
        BACKENDAI_CLUSTER_REPLICAS   = "$${NOMAD_META_BACKENDAI_CLUSTER_REPLICAS}"
        BACKENDAI_CLUSTER_ROLE       = "sub"
        BACKENDAI_CLUSTER_SIZE       = "$${NOMAD_META_BACKENDAI_CLUSTER_SIZE}"
        BACKENDAI_KERNEL_ID          = "73942fbb-5499-5ccd-9cba-bada05bd17b0"
        BACKENDAI_SESSION_ID         = "$${NOMAD_META_BACKENDAI_SESSION_ID}"
        BACKENDAI_SSH_PORT           = "$${NOMAD_META_BACKENDAI_SSH_PORT}"
        LOCAL_RANK                   = "2"
        MASTER_ADDR                  = "$${NOMAD_META_MASTER_ADDR}"
        MASTER_PORT                  = "$${NOMAD_META_MASTER_PORT}"
        PROJECT                      = "example"
        RANK                         = "2"
        TF_CONFIG                    = "{\"cluster\": {\"worker\": $${NOMAD_META_BACKENDAI_TF_WORKERS}}, \"task\": {\"type\": \"worker\", \"index\": 2}}"
        WORLD_RANK                   = "2"
        WORLD_SIZE                   = "$${NOMAD_META_WORLD_SIZE}"
      }

      resources {
        cpu    = 1000
        memory = 2048
      }

      template {
        destination = "secrets/backendai/id"
        perms       = "0600"
        change_mode = "noop"
        data        = "{{ with nomadVar \"nomad/jobs/example-single\" }}{{ .ssh_private_key }}{{ end }}"
      }

      template {
        destination = "secrets/backendai/id.pub"
        perms       = "0644"
        change_mode = "noop"
        data        = "{{ with nomadVar \"nomad/jobs/example-single\" }}{{ .ssh_public_key }}{{ end }}"
      }

      template {
        destination = "local/backendai/peers"
        change_mode = "noop"
        data        = "{{ range nomadService \"bai-example-single-96a679c3\" }}{{ .Address }} {{ index .Tags 0 }}\n{{ end }}"
      }

      template {
        destination = "local/backendai/entrypoint.sh"
        perms       = "0755"
        change_mode = "noop"
        data        = "{{ env \"NOMAD_META_BACKENDAI_ENTRYPOINT\" }}"
      }
    }
  }
}
