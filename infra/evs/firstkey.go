package main

import (
	"cmp"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/evs-dev/evs/internal/api"
)

// firstKeyName is the file in the data directory that holds the first
// live key when evs serve made it with no terminal to show it on.
const firstKeyName = "first-api-key"

// showFirstKey hands the key of the account the first start made to the
// operator, once, with an example call. A live account's key is printed
// only to a terminal; elsewhere (a journal, a pipe) it goes to a file
// readable by this user alone, whose path is logged. A test-mode key,
// which spends nothing, is printed wherever stdout goes.
func showFirstKey(stdout io.Writer, logger *slog.Logger, dataDir, key string, testAccount bool, base string) error {
	kind := "live"
	example := "alice@example.com"
	if testAccount {
		kind = "test-mode (sandbox: no network; the local part picks the outcome)"
		example = "alice+rejected_email@example.com"
	}
	if f, ok := stdout.(*os.File); ok && !testAccount && !isTerminal(f.Fd()) {
		path, err := writeKeyFile(dataDir, key)
		if err != nil {
			return fmt.Errorf("first start: the %s account's API key was made but could not be written down (%w); "+
				"make another with: %s", kind, err, keysCreateHint(func(string) string { return dataDir }))
		}
		logger.Warn("first start: created a "+kind+" account; no terminal to show its API key on, so it is in a file readable by this user only: "+
			"read it, keep it elsewhere, and delete the file", "file", path)
		return nil
	}
	fmt.Fprintf(stdout, `
First start: created a %s account and its API key. It is shown only now:

  export EVS_API_KEY=%s

Try it:

  curl -s %s/v1/verify -H "X-Api-Key: $EVS_API_KEY" -H 'Content-Type: application/json' -d '{"email":"%s"}'

or open the web console in a browser and paste the key there:

  %s%s

`, kind, key, base, example, base, api.ConsolePath)
	return nil
}

// writeKeyFile writes key to firstKeyName in dir, 0600 whatever was there
// before, synced before it is named to anyone.
func writeKeyFile(dir, key string) (string, error) {
	path, err := filepath.Abs(filepath.Join(dir, firstKeyName))
	if err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return "", err
	}
	err = f.Chmod(0o600)
	if err == nil {
		_, err = fmt.Fprintln(f, key)
	}
	if err == nil {
		err = f.Sync()
	}
	err = cmp.Or(err, f.Close())
	return path, err
}
