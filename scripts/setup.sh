#!/usr/bin/env bash
# mqlab set-up: installs what mqlab needs on a Debian/Ubuntu machine, then
#   bash scripts/setup.sh run [PROFILE] [mqlab run options]  runs PROFILE, by default the main
#                                                            job (profiles/pika-vs-kombu.toml)
#   bash scripts/setup.sh test [pytest arguments]            runs ruff, mypy and the test suite
# System packages (RabbitMQ, Redis, a C toolchain for python-qpid-proton) are
# installed with apt-get when run as root or with password-less sudo; otherwise
# the script names what is missing and stops.
set -euo pipefail

mode=${1:-run}
shift || true
case $mode in run | test) ;; *)
  echo "usage: bash scripts/setup.sh run [PROFILE] [mqlab run options] | test [pytest arguments]" >&2
  exit 2
  ;;
esac
cd "$(dirname "$0")/.."
say() { printf '\033[1msetup:\033[0m %s\n' "$*" >&2; }

# -- system packages -----------------------------------------------------------
# rabbitmq-server: the broker (AMQP 0-9-1, AMQP 1.0 and management plugins ship with it)
# redis-server: the redis-streams driver's server and the zmq driver's optional matchmaker
# nats-server, mosquitto: the nats and mqtt drivers' servers (mqlab starts private ones on
# free ports; the system services Debian starts on install are stopped below, never used)
# gcc, pkg-config, libssl-dev, libsasl2-dev, python3-dev: python-qpid-proton builds from source,
# and mqlab's own hot modules compile with mypyc (setup.py; MQLAB_COMPILE=0 keeps them pure);
# libsasl2-modules: the PLAIN mechanism the amqp1 driver always asks for
# iproute2, nftables: the `loss` fault runs a step's workers in a network namespace whose veth
# link drops packets at random (nft numgen); no tc netem needed
packages=(rabbitmq-server redis-server nats-server mosquitto gcc pkg-config libssl-dev libsasl2-dev libsasl2-modules python3-dev python3-venv iproute2 nftables)
# chromium (test only): the suite opens `mqlab report`'s HTML in it, headless, to check that
# every chart draws (Debian's package; on Ubuntu it is a snap, which CI containers cannot run)
# tmux (test only): the live monitor's tests run `mqlab run` in a tmux pane and press keys
# openssh-server (test only): `mqlab hosts up`'s tests run sshd (their own config and keys, by
# PID) in each load host's network namespace; the system's ssh service is not used
# beanstalkd (test only): the server of examples/beanstalk, the plugin for a broker mqlab does
# not know, which its test runs the kit and a managed run against
if [[ $mode == test ]]; then packages+=(chromium tmux openssh-server beanstalkd); fi
# a Java runtime (test only, when there is none): RabbitMQ PerfTest, the broker's ceiling
# that `mqlab ceiling` shows, and the managed Kafka broker; their tests never skip
if [[ $mode == test ]] && ! command -v java >/dev/null; then packages+=(default-jre-headless); fi
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -eq 0 ]]; then sudo=(); elif sudo -n true 2>/dev/null; then sudo=(sudo -n); else
    say "missing system packages: ${missing[*]}"
    say "install them with: sudo apt-get install -y ${missing[*]}   (then run this again)"
    exit 1
  fi
  say "installing ${missing[*]} (apt-get)"
  "${sudo[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq --no-install-recommends \
    "${missing[@]}" >/dev/null
  services=(mosquitto nats-server redis-server beanstalkd)
  # the ssh service only when this very install brought it (a machine reached over SSH keeps it)
  if [[ " ${missing[*]} " == *" openssh-server "* ]]; then services+=(ssh); fi
  for svc in "${services[@]}"; do
    if command -v systemctl >/dev/null && systemctl is-active --quiet "$svc" 2>/dev/null; then
      "${sudo[@]}" systemctl disable --now "$svc" >/dev/null 2>&1 || true
    fi
  done
fi

# -- Python environment --------------------------------------------------------
py=${PYTHON:-python3}
if ! "$py" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null; then
  say "mqlab needs Python 3.11 or newer; $py is $("$py" -V 2>&1). Set PYTHON=/path/to/python3.11"
  exit 1
fi
if [[ ! -x .venv/bin/python ]]; then
  say "creating .venv"
  "$py" -m venv .venv
fi
say "installing mqlab and its plugins into .venv"
# pip and setuptools talk a lot (setuptools warns about every editable install):
# their output goes to a log, shown only when pip fails
log=.venv/setup-pip.log
pip_quietly() {
  if ! .venv/bin/python -m pip install --disable-pip-version-check "$@" >"$log" 2>&1; then
    say "pip failed (its output, also in $log):"
    cat "$log" >&2
    exit 1
  fi
}
pip_quietly --upgrade pip
plugins=()
for d in plugins/*/; do [[ -f $d/pyproject.toml ]] && plugins+=(-e "$d"); done
# test mode: the hosts extra too (Dask distributed, cryptography), which tests/test_hosts.py uses
extras=dev
# test mode: examples/beanstalk too (a plugin package outside plugins/, with its server)
if [[ $mode == test ]]; then extras=dev,hosts; plugins+=(-e examples/beanstalk); fi
pip_quietly -e ".[$extras]" "${plugins[@]}"
# the results' environment says which path the per-message modules run (mqlab/native.py)
say "harness: $(.venv/bin/python -c 'from mqlab import native; s = native.status(); print(s["path"], "-", s.get("compiler") or s.get("why"))')"

# RabbitMQ PerfTest (optional): `mqlab ceiling` shows its rate as the broker's own ceiling.
# Its jars come from Maven Central into ~/.cache/mqlab (a few MB, once); without Java,
# `mqlab ceiling` says so in one line and shows the rest.
if command -v java >/dev/null; then
  .venv/bin/python -m mqlab.ceiling.perftest >/dev/null 2>&1 || say "RabbitMQ PerfTest could not be fetched; mqlab ceiling will try again"
else
  say "no Java: mqlab ceiling will run without RabbitMQ PerfTest (apt-get install default-jre-headless to add it)"
fi

# Kafka (the kafka and oslo-kafka drivers' managed broker): its jars come from Maven Central
# into ~/.cache/mqlab/kafka-<version> (46 MB, once). The tests start it: there, a jar that
# cannot be fetched stops the set-up; otherwise the first managed Kafka run fetches them.
if command -v java >/dev/null; then
  if ! .venv/bin/python -m mqlab.servers.kafka >/dev/null 2>.venv/setup-kafka.log; then
    if [[ $mode == test ]]; then
      say "the Kafka jars could not be fetched from Maven Central:"
      cat .venv/setup-kafka.log >&2
      exit 1
    fi
    say "the Kafka jars could not be fetched; a managed Kafka run will try again"
  fi
fi

# ActiveMQ Artemis (the amqp1 driver's second broker, `broker = "artemis"`): its jars come from
# Maven Central into ~/.cache/mqlab/artemis-<version> (about 20 MB, once). The tests start it:
# there, a jar that cannot be fetched stops the set-up; otherwise the first run fetches them.
if command -v java >/dev/null; then
  if ! .venv/bin/python -m mqlab.servers.artemis >/dev/null 2>.venv/setup-artemis.log; then
    if [[ $mode == test ]]; then
      say "the Artemis jars could not be fetched from Maven Central:"
      cat .venv/setup-artemis.log >&2
      exit 1
    fi
    say "the Artemis jars could not be fetched; a run that needs Artemis will try again"
  fi
fi

if [[ $mode == run ]]; then
  profile=profiles/pika-vs-kombu.toml # the main job, unless a profile comes first
  if [[ ${1:-} == *.toml ]]; then
    profile=$1
    shift
  fi
  exec .venv/bin/mqlab run "$profile" "$@"
fi

# -- the whole test suite ------------------------------------------------------
say "ruff"
.venv/bin/ruff check .
.venv/bin/ruff format --check .
say "mypy --strict"
# the examples are models: typed like the core
typed=(mqlab examples/memory_transport.py examples/redis_lists.py examples/beanstalk/mqlab_beanstalk.py)
for d in plugins/*/pyproject.toml; do
  name=$(basename "$(dirname "$d")")
  typed+=("plugins/$name/mqlab_$name")
done
.venv/bin/mypy "${typed[@]}"
say "pytest"
set +e
# the slowest tests are listed so the suite's time stays visible. Four pytest-xdist
# workers, a test file each at a time, each with its own RabbitMQ node: most of a test's
# time is waiting (a run's fixed duration, a broker starting), so four overlap even on two
# cores: on the 2-core VM the parallel pass took 20.6 min with three, 18.9 with four, and
# the whole of .ci/run 28.4 and 26.7 (docs/development.md).
# MQLAB_TEST_WORKERS=0 runs it serially. Tests marked
# `serial` time a broker fault within a step through rabbitmqctl, whose own start took 8 s
# beside the parallel pass: they run after it, two at a time (one at a time took 436 s, two
# 220 s, and passed). Tests marked `alone` assert a quiet machine: they run last, by
# themselves. Arguments go to pytest (one pass).
workers=${MQLAB_TEST_WORKERS:-4}
pytest=(.venv/bin/python -m pytest -p no:cacheprovider --durations=15)
# a file is one unit of work; pytest-xdist hands out those with the most tests first. Handing
# out the slowest first (--no-loadscope-reorder and an order of our own) ran them all at once
# and made the pass slower on two cores: 1,254 s against 1,085 to 1,174 s
spread=(-n "$workers" --dist loadfile)
if [[ $# -gt 0 ]]; then
  "${pytest[@]}" "${spread[@]}" "$@"
  rc=$?
else
  "${pytest[@]}" "${spread[@]}" -m "not serial and not alone"
  rc=$?
  say "pytest: the tests that time a broker fault, two at a time"
  "${pytest[@]}" -n "$(( workers < 2 ? workers : 2 ))" --dist loadfile -m serial
  serial=$?
  say "pytest: the tests that need the machine to themselves"
  "${pytest[@]}" -m alone
  alone=$?
  # any pass failing (or finding no test) fails
  for code in $serial $alone; do if [[ $rc -eq 0 ]]; then rc=$code; fi; done
fi
set -e
if [[ $rc -eq 5 ]]; then
  say "pytest collected no tests: that is a failure"
  exit 1
fi
exit $rc
