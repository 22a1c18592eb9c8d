#!/usr/bin/env bash
# Headless Chromium and its WebDriver for the Dash app's browser test (tests/test_dash_browser.py).
# Debian's packages: `chromium` (the browser) and `chromium-driver` (chromedriver of the same version).
# Downloading a browser another way (playwright install, Chrome for Testing) does not work offline.
#
# Idempotent: nothing is installed when both binaries are already on the PATH.
set -euo pipefail

if command -v chromium >/dev/null && command -v chromedriver >/dev/null; then
    echo "chromium.sh: $(chromium --version 2>/dev/null | head -1); $(chromedriver --version | head -1)"
    exit 0
fi

sudo=""
if [ "$(id -u)" -ne 0 ]; then
    command -v sudo >/dev/null || { echo "chromium.sh: run as root or install sudo" >&2; exit 1; }
    sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends chromium chromium-driver
chromium --version 2>/dev/null | head -1
chromedriver --version | head -1
