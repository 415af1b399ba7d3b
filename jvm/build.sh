#!/bin/bash
# Builds the legacy-format extractor: one self-contained jar (our classes + POI HWPF/HSSF and the three
# commons jars it needs, nothing from OOXML) and a static AppCDS archive trained on jvm/training/.
# Idempotent: a stamp over sources, dependency jars and `java -version` skips all work when nothing changed,
# so a JDK or POI package update triggers a rebuild by itself.
#   jvm/build.sh           build if stale, print jar and archive paths
#   jvm/build.sh --check   also run one -Xshare:on extraction; rebuild the archive when the JVM rejects it
#   jvm/build.sh --force   rebuild everything
# Env: JAVA_HOME (else java/javac on PATH), TENDER_POOL_JVM_DIR (output dir, default jvm/build),
#      TENDER_POOL_POI_DIR (where poi.jar & co. live, default /usr/share/java).
set -euo pipefail

HERE=$(cd "$(dirname "$(readlink -f "$0")")" && pwd)
OUT=${TENDER_POOL_JVM_DIR:-$HERE/build}
LIBDIR=${TENDER_POOL_POI_DIR:-/usr/share/java}
BIN=${JAVA_HOME:+$JAVA_HOME/bin/}
JAVA=${BIN}java
JAVAC=${BIN}javac
JARTOOL=${BIN}jar
JAR=$OUT/tender-extract.jar
JSA=$OUT/tender-extract.jsa
STAMP=$OUT/stamp
MODE=${1:-}

die() { echo "build.sh: $*" >&2; exit 1; }
case "$MODE" in ""|--check|--force) ;; *) die "usage: build.sh [--check|--force]" ;; esac
for t in "$JAVA" "$JAVAC" "$JARTOOL"; do command -v "$t" >/dev/null || die "$t not found (install openjdk-17-jdk)"; done

DEPS=()
for name in poi poi-scratchpad commons-collections4 commons-math3 commons-codec; do
    f=$(readlink -f "$LIBDIR/$name.jar" 2>/dev/null || true)
    [ -n "$f" ] && [ -f "$f" ] || die "$LIBDIR/$name.jar missing (install libapache-poi-java)"
    DEPS+=("$f")
done

mkdir -p "$OUT"
exec 9>"$OUT/.lock"
flock 9  # two test sessions building at once must not interleave writes

stamp() {
    {
        "$JAVA" -version 2>&1
        for f in "${DEPS[@]}"; do stat -c '%n %s %Y' "$f"; done
        find "$HERE/src" "$HERE/training" -type f | LC_ALL=C sort | xargs sha256sum
        sha256sum "$HERE/build.sh"
    } | sha256sum | cut -d' ' -f1
}

FLAGS=(-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:-UsePerfData -Xmx256m)

smoke() {
    "$JAVA" -XX:SharedArchiveFile="$JSA" -Xshare:on "${FLAGS[@]}" -jar "$JAR" doc "$HERE/training/notice.doc" >/dev/null 2>&1
}

print_paths() {
    echo "jar: $JAR"
    echo "archive: $JSA"
}

NEW=$(stamp)
if [ "$MODE" != --force ] && [ -f "$JAR" ] && [ -f "$JSA" ] && [ "$(cat "$STAMP" 2>/dev/null)" = "$NEW" ]; then
    if [ "$MODE" != --check ] || smoke; then
        print_paths
        exit 0
    fi
    echo "build.sh: archive rejected by this JVM, rebuilding" >&2
fi

WORK=$(mktemp -d "$OUT/.work.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
CP=$(IFS=:; echo "${DEPS[*]}")

"$JAVAC" -encoding UTF-8 --release 17 -nowarn -cp "$CP" -d "$WORK/classes" $(find "$HERE/src" -name '*.java') \
    2> >(grep -v '^Note:' >&2) || die "javac failed"

# One jar: CDS archives only classes loaded from jars, and a single path keeps the run-time classpath check trivial.
mkdir -p "$WORK/fat"
for f in "${DEPS[@]}"; do (cd "$WORK/fat" && unzip -qo "$f" -x 'META-INF/*') || die "cannot unpack $f"; done
cp -r "$WORK/classes/." "$WORK/fat/"
"$JARTOOL" --create --file "$WORK/tender-extract.jar" --main-class tenderpool.extract.Main -C "$WORK/fat" . \
    || die "jar failed"
mv -f "$WORK/tender-extract.jar" "$JAR"

# Training run through serve mode: both readers, an error path and a bad request, so their classes are archived.
{
    printf '{"mode":"doc","path":"%s"}\n' "$HERE/training/notice.doc"
    printf '{"mode":"xls","path":"%s"}\n' "$HERE/training/signin.xls"
    printf '{"mode":"doc","path":"%s"}\n' "$HERE/training/signin.xls"
    printf '{"mode":"doc","path":"%s"}\n' "$HERE/build.sh"
    printf 'not json\n'
} | "$JAVA" -Xshare:off -XX:DumpLoadedClassList="$WORK/classes.lst" "${FLAGS[@]}" -jar "$JAR" serve >"$WORK/train.out" \
    2>"$WORK/train.err" || { cat "$WORK/train.err" >&2; die "training run failed"; }
[ "$(grep -c '"t":"end"' "$WORK/train.out")" = 5 ] || { cat "$WORK/train.err" >&2; die "training run gave bad output"; }

"$JAVA" -Xshare:dump -XX:SharedClassListFile="$WORK/classes.lst" -XX:SharedArchiveFile="$WORK/tender-extract.jsa" \
    -XX:+UseSerialGC -jar "$JAR" >"$WORK/dump.log" 2>&1 || { tail -20 "$WORK/dump.log" >&2; die "-Xshare:dump failed"; }
mv -f "$WORK/tender-extract.jsa" "$JSA"

smoke || die "smoke test with -Xshare:on failed"
echo "$NEW" >"$STAMP"
print_paths
