# shellcheck shell=bash disable=SC2034  # the variables are the caller's
# Sourced by the interleaved checks (perf/tuner_check.sh, perf/calibration_check.sh) for their
# common options. The caller sets the defaults of ranks, rounds, min_time, sizes and builddir;
# checkArgs NAME "$@" takes --ranks --rounds --min-time --sizes --builddir --out --markdown
# from the command line, sets out (default $builddir/NAME) and markdown, and makes out.
checkArgs() {
  local name="$1"
  shift
  out=""
  markdown=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --ranks) ranks="$2"; shift 2 ;;
      --rounds) rounds="$2"; shift 2 ;;
      --min-time) min_time="$2"; shift 2 ;;
      --sizes) sizes="$2"; shift 2 ;;
      --builddir) builddir="$2"; shift 2 ;;
      --out) out="$2"; shift 2 ;;
      --markdown) markdown="$2"; shift 2 ;;
      *) echo "$name.sh: unknown argument $1" >&2; exit 2 ;;
    esac
  done
  out="${out:-$builddir/$name}"
  mkdir -p "$out"
}
