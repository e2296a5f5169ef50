package cmd

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/banksim/bank-sim/chaos"
	"github.com/banksim/bank-sim/faults/netns"
	"github.com/banksim/bank-sim/postgres"
	"github.com/banksim/bank-sim/postgres/banks"
	"github.com/spf13/cobra"
)

// partitionPlan reads --partition and its flags, refusing what cannot be
// partitioned before anything starts: nil without --partition.
func (o chaosOptions) partitionPlan(app *App, c *cobra.Command) (*chaos.PartitionPlan, error) {
	if o.partition == "" {
		for _, name := range []string{"cuts", "cut-for", "cut-at", "loss", "delay"} {
			if c.Flags().Changed(name) {
				return nil, usageError("--%s shapes the network of a --partition run: give --partition too", name)
			}
		}
		return nil, nil
	}
	plan := &chaos.PartitionPlan{Of: o.partition}
	switch o.partition {
	case chaos.PartitionApp:
		switch {
		case o.failover:
			return nil, usageError("--partition app runs the app servers on bank-sim's one PostgreSQL; with --failover give --partition standby (the primary cut off from its standby before the failover)")
		case o.cuts < 1 || o.cuts > 20:
			return nil, usageError("--cuts %d: give 1 to 20", o.cuts)
		case o.cutFor < 100*time.Millisecond || o.cutFor > 10*time.Minute:
			return nil, usageError("--cut-for %s: give 100ms to 10m", o.cutFor)
		case o.cutAt != "commit" && o.cutAt != "intent":
			return nil, usageError("--cut-at %q: give commit or intent", o.cutAt)
		case o.loss < 0 || o.loss > 50:
			return nil, usageError("--loss %g: give a percentage from 0 to 50", o.loss)
		case o.delay < 0 || o.delay > time.Second:
			return nil, usageError("--delay %s: give 0 to 1s", o.delay)
		}
		plan.Cuts, plan.For, plan.AfterCommit = o.cuts, o.cutFor, o.cutAt == "commit"
		plan.Loss, plan.Delay = o.loss, o.delay
	case chaos.PartitionStandby:
		if !o.failover {
			return nil, usageError("--partition standby cuts the primary off from its standby before a failover: give --failover too")
		}
		for _, name := range []string{"cuts", "cut-for", "cut-at", "loss", "delay"} {
			if c.Flags().Changed(name) {
				return nil, usageError("--%s shapes the network of --partition app; --partition standby cuts once, at the failover's seeded intent, until the failover", name)
			}
		}
	default:
		return nil, usageError("--partition %q: give app (the app servers cut off from PostgreSQL) or standby (with --failover: the primary cut off from its standby)", o.partition)
	}
	switch {
	case o.kill:
		return nil, usageError("give --partition or --kill-postgres, not both: a run has one fault of the database's at a time")
	case o.duration > 0:
		return nil, usageError("--partition needs --intents, not --duration: the cuts start at intents the seed picks")
	case app.externalURL() != "":
		return nil, usageError("--partition needs a PostgreSQL that bank-sim starts itself, listening on the run's private links (the only way its app servers reach it); it cannot use the server at --database-url / DATABASE_URL")
	}
	if err := netns.Available(); err != nil {
		return nil, usageError("--partition needs network namespaces: %v", err)
	}
	return plan, nil
}

// runChaosPartition is chaos --partition app: each server copy in a
// network namespace of the run's own, reaching PostgreSQL over a veth
// pair that is cut at the seeded intents; the history is judged like any
// run's. The namespaces are removed when it ends, and by bank-sim prune
// if it is killed.
func runChaosPartition(c *cobra.Command, app *App, o chaosOptions, cfg chaos.Config) error {
	ctx := c.Context()
	out, errOut := app.Env.Stdout, app.Env.Stderr
	p := app.palette()
	plan := cfg.Partition
	cacheDir, err := postgres.CacheDir(app.Env.Getenv("BANK_SIM_CACHE_DIR"))
	if err != nil {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("--partition records its namespaces in the cache directory: %v", err)}
	}
	an, err := chaos.NewAppNet(netns.StateDir(cacheDir), cfg.Instances)
	if err != nil {
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("making the run's network namespaces: %v", err)}
	}
	defer func() {
		if err := an.Close(); err != nil {
			fmt.Fprintf(errOut, "bank-sim: removing the run's network namespaces: %v (bank-sim prune removes what is left)\n", err)
		}
	}()
	// Delay and loss go on before PostgreSQL starts: what this machine
	// cannot do is a usage error that costs no server.
	part := &chaos.Partition{Links: an.DB, At: plan.At(cfg), For: plan.For, AfterCommit: plan.AfterCommit, Loss: plan.Loss, Delay: plan.Delay}
	if err := part.Start(); err != nil {
		switch {
		case errors.Is(err, netns.ErrNoNetem):
			return usageError("--delay needs the kernel's netem queueing discipline (sch_netem), which this kernel lacks; --loss and the cuts work without it")
		case errors.Is(err, netns.ErrNoNft):
			return usageError("--loss %g needs nftables' nft command: apt-get install nftables", plan.Loss)
		}
		return &ExitError{Code: ExitFailed, Err: fmt.Errorf("the links' delay and loss: %v", err)}
	}
	srv, err := app.serverWith(ctx, postgres.Options{ListenAddresses: an.ListenAddresses(), AllowClients: an.Clients()})
	if err != nil {
		return err
	}
	if !o.asJSON {
		printWrapped(out, app.describe(srv), app.Env.Width, p.dim)
		printWrapped(out, fmt.Sprintf("network: %d namespaces (banksim-%s-app1…), each with 2 veth links, in %s, set up in %s (%s a namespace); removed at the end, and by bank-sim prune if this run is killed",
			cfg.Instances, an.Net.ID(), an.Net.Subnet(), an.Setup.Round(time.Millisecond), (an.Setup/time.Duration(cfg.Instances)).Round(time.Millisecond)), app.Env.Width, p.dim)
		fmt.Fprintf(out, "%s\n", describeConfig(cfg))
	}
	db, err := banks.OnServer(srv, banks.Options{}).NewBank(ctx, "chaos")
	if err != nil {
		return runFailed(fmt.Errorf("chaos run (seed %d): %w", cfg.Seed, err))
	}
	defer db.Close()
	pool, err := chaos.PoolFor(ctx, db.Pool, cfg)
	if err != nil {
		return runFailed(fmt.Errorf("chaos run (seed %d): %w", cfg.Seed, err))
	}
	defer pool.Close()
	hosts, err := an.Hosts(ctx, db.Pool.Config().ConnString(), int32(cfg.Clients)+4)
	if err != nil {
		return runFailed(fmt.Errorf("chaos run (seed %d): the app servers in their namespaces: %w", cfg.Seed, err))
	}
	part.DB = pool
	bar := newProgress(app, "intents settled", "bank-sim chaos:", o.asJSON)
	opts := chaos.Options{Hosts: hosts, Progress: bar.update}
	part.Options(&opts)
	h, err := chaos.RunWith(ctx, pool, cfg, opts)
	bar.clear()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return runFailed(fmt.Errorf("partitioned chaos run (seed %d): %w", cfg.Seed, err))
	}
	return o.verdict(app.Env, out, p, h, nil)
}

// describePartition is the header's line for a partitioned run.
func describePartition(cfg chaos.Config) string {
	pl := cfg.Partition
	if pl == nil {
		return ""
	}
	if pl.Of == chaos.PartitionStandby {
		return "" // the failover's line says it
	}
	when := "as each starts"
	if pl.AfterCommit {
		when = "right after the first commit once each has started"
	}
	at := strings.Trim(fmt.Sprint(pl.At(cfg)), "[]")
	s := fmt.Sprintf(" · partition: the %d app servers, each in a network namespace, cut off from PostgreSQL %d times for %s, at intents %s (%s)",
		cfg.Instances, pl.Cuts, pl.For, at, when)
	if pl.Loss > 0 {
		s += fmt.Sprintf(", %g%% of the packets between them lost each way all along", pl.Loss)
	}
	if pl.Delay > 0 {
		s += fmt.Sprintf(", every packet between them held %s each way", pl.Delay)
	}
	return s
}

// partitionFlags are the flags that repeat cfg's partition.
func partitionFlags(cfg chaos.Config) string {
	pl := cfg.Partition
	if pl == nil {
		return ""
	}
	if pl.Of == chaos.PartitionStandby {
		return " --partition=standby"
	}
	at := "intent"
	if pl.AfterCommit {
		at = "commit"
	}
	s := fmt.Sprintf(" --partition --cuts %d --cut-for %s --cut-at %s", pl.Cuts, pl.For, at)
	if pl.Loss > 0 {
		s += fmt.Sprintf(" --loss %g", pl.Loss)
	}
	if pl.Delay > 0 {
		s += fmt.Sprintf(" --delay %s", pl.Delay)
	}
	return s
}
