# Sourced by the scripts that measure Loom (perf/compare.sh, perf/tuner_check.sh):
# measuredBuild DIR makes DIR a release build with link-time optimisation, or turns an
# existing DIR into one. Link-time optimisation inlines the small-call path across files
# (api, group, choice, board): a 2-rank 8 B allreduce takes about an eighth less time,
# large calls the same.
measuredBuild() {
  if [ ! -f "$1/build.ninja" ]; then
    meson setup "$1" --buildtype=release -Db_lto=true -Dtests=false >/dev/null
  else
    meson configure "$1" -Dbuildtype=release -Db_lto=true >/dev/null
  fi
}
