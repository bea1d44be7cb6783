#!/usr/bin/env bash
# fetch-mta.sh ROOT: Exim 4 and OpenSMTPD for the tests (make mta), unpacked
# into the private root ROOT, where internal/testkit (exim.go, opensmtpd.go)
# starts them as loopback peers.
#
# They are not installed: exim4-daemon-light, opensmtpd and postfix all
# provide and conflict on mail-transport-agent, so "apt-get install" of
# either would remove the Postfix the other tests run. apt-get download
# fetches the Debian packages and dpkg-deb -x unpacks them; libidn12, which
# the exim4 binary links and a Debian base system lacks, comes along, and
# ldd checks that nothing else is missing. The daemons' system users
# (Debian-exim; opensmtpd and opensmtpq), whose names are compiled into the
# binaries, are made as the packages' postinst scripts make them. Nothing
# else on the system changes. Every failure ends with one line that says
# why, on stderr, and exit status 1.
set -euo pipefail

root=${1:?usage: fetch-mta.sh ROOT}
pkgs=(exim4-daemon-light opensmtpd libidn12)
fail() { echo "make: $*" >&2; exit 1; }

users_ok() {
	getent passwd Debian-exim >/dev/null && getent passwd opensmtpd >/dev/null && getent passwd opensmtpq >/dev/null
}

if [ -x "$root/usr/sbin/exim4" ] && [ -x "$root/usr/sbin/smtpd" ] && [ -e "$root/.evs-complete" ] && users_ok; then
	exit 0
fi
command -v apt-get >/dev/null 2>&1 || fail "the tests need Exim and OpenSMTPD unpacked in $root and apt-get is not here to download them (Debian packages: ${pkgs[*]})"
[ "$(id -u)" = 0 ] || fail "the tests need Exim and OpenSMTPD (and their system users): run make mta as root"

if ! [ -e "$root/.evs-complete" ]; then
	echo "make: fetching ${pkgs[*]} into $root (unpacked, not installed: installing them would remove Postfix)"
	parent=$(dirname "$root")
	mkdir -p "$parent" || fail "cannot create $parent"
	work=$(mktemp -d "$parent/fetch.XXXXXX") || fail "cannot create a directory under $parent"
	trap 'rm -rf "$work"' EXIT
	# apt-get download writes into the current directory; as root it warns
	# that the _apt user cannot write there, which is harmless.
	( cd "$work" && { apt-get download -qq "${pkgs[@]}" >/dev/null 2>&1 ||
		{ apt-get update -qq >/dev/null 2>&1 && apt-get download -qq "${pkgs[@]}" >/dev/null 2>&1; }; } ) ||
		fail "apt-get download could not fetch ${pkgs[*]}"
	mkdir "$work/root"
	for deb in "$work"/*.deb; do
		dpkg-deb -x "$deb" "$work/root" || fail "dpkg-deb could not unpack $(basename "$deb")"
	done
	libs=$(echo "$work"/root/usr/lib/*-linux-gnu)
	missing=$(LD_LIBRARY_PATH=$libs ldd "$work/root/usr/sbin/exim4" "$work/root/usr/sbin/smtpd" 2>&1 | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
	[ -z "$missing" ] || fail "the unpacked exim4 or smtpd needs libraries this system lacks: $missing"
	(cd "$work" && ls ./*.deb) >"$work/root/.evs-complete"
	rm -rf "$root"
	mv "$work/root" "$root" || fail "cannot move the unpacked packages to $root"
fi

# The system users, as exim4-base's and opensmtpd's postinst make them.
if ! getent passwd Debian-exim >/dev/null; then
	adduser --system --group --quiet --home /var/spool/exim4 --no-create-home --disabled-login --force-badname Debian-exim >/dev/null 2>&1 ||
		fail "adduser could not make the Debian-exim system user that exim4 runs as"
fi
for name in opensmtpd opensmtpq; do
	getent group "$name" >/dev/null || addgroup --system --quiet "$name" >/dev/null 2>&1 ||
		fail "addgroup could not make the $name system group that smtpd runs as"
	getent passwd "$name" >/dev/null || adduser --system --quiet --home /var/lib/opensmtpd/empty --no-create-home \
		--disabled-password --gecos "OpenSMTPD" --ingroup "$name" "$name" >/dev/null 2>&1 ||
		fail "adduser could not make the $name system user that smtpd runs as"
done
