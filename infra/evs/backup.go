package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/evs-dev/evs/internal/config"
	"github.com/evs-dev/evs/internal/sqlitestore"
)

// newBackupCmd is `evs backup DEST`.
func newBackupCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "backup DEST",
		Short: "copy the embedded store to a new directory, while evs serve runs",
		Long: `Writes a consistent copy of everything the embedded store in EVS_DATA_DIR
holds (accounts, keys, batches and results, webhook secrets, Idempotency-Key
replies, uploads) to the new directory DEST, while evs serve goes on
serving: the copy is the database as it was at one instant. DEST must not
exist or be empty; it is made 0700, and evs serve can start on it
(EVS_DATA_DIR=DEST). The copy keeps the store's schema version: backup
never migrates. See docs/operations.md for restoring.`,
		Example: `  EVS_DATA_DIR=/var/lib/evs evs backup /var/backups/evs-$(date +%F)`,
		Args:    argsFrom(1, 1, "one destination directory"),
		RunE: func(_ *cobra.Command, args []string) error {
			cfg, err := config.FromEnv(c.getenv, false)
			if err != nil {
				return err
			}
			if err := sqlitestore.Backup(c.ctx, cfg.DataDir, args[0]); err != nil {
				return err
			}
			fmt.Fprintf(c.stderr, "backed up %s to %s\n", cfg.DataDir, args[0])
			return nil
		},
	}
	return withEnv(cmd, "EVS_DATA_DIR")
}
