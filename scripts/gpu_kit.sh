#!/usr/bin/env bash
# Prepare the GPU campaign (validation/gpu_campaign.py) for a GPU machine that has Python 3.12 with torch,
# numpy, scipy, networkx, pyyaml, rich and matplotlib but not pulp, highspy or pydantic, and cannot fetch:
# downloads those wheels (the versions constraints.txt pins) into .whl/ (git-ignored), checks that the
# campaign's plans and its dry run are in place, and prints the one command to run there.
#
#   bash scripts/gpu_kit.sh            # wheels + the command
#   bash scripts/gpu_kit.sh --dry-run  # the same, and first the campaign's dry run on this CPU (~1 minute)
set -euo pipefail
cd "$(dirname "$0")/.."
pin() { grep -i "^$1==" constraints.txt | cut -d= -f3; }
PY=3.12
WHEELS=(
  "PuLP==$(pin PuLP)"
  "highspy==$(pin highspy)"
  "pydantic==$(pin pydantic)"
  "pydantic_core==$(pin pydantic_core)"
  "annotated-types==0.7.0"        # pydantic's needs, at the versions this machine resolves
  "typing-inspection==0.4.2"
  "typing_extensions==4.15.0"
)
rm -rf .whl && mkdir -p .whl
for w in "${WHEELS[@]}"; do
  python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version "$PY" --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 --platform manylinux1_x86_64 -d .whl "$w"
done
# the GPU machine's copy of the tree carries git metadata as of the session's start: the report reads this instead
state=clean; [[ -n "$(git status --porcelain -- placer validation)" ]] && state=dirty
echo "$(git rev-parse HEAD) $state" > .whl/COMMIT
echo "wheels in .whl/ ($(du -sh .whl | cut -f1)):" >&2
ls .whl >&2
test -f validation/gpu_plans/manifest.json || { echo "no validation/gpu_plans: run python3 validation/gpu_campaign.py --make-plans" >&2; exit 1; }
if [[ "${1:-}" == "--dry-run" ]]; then
  out=$(mktemp -d)
  python3 validation/gpu_campaign.py --out "$out" --dry-run >&2
  echo "dry run ok: $out" >&2
fi
cat <<'CMD'
On the GPU machine (the repository's root; carry .whl; timeout_s 330; results land flat in $OUT, at most 8 files):

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 && python3 validation/gpu_campaign.py --out $OUT --budget-s 300

Then copy $OUT's fidelity-<device>-<date>.json, .png, micro.json, calibrated.yaml and campaign.log into
validation/results/gpu-<date>/ and commit them.
CMD
