package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"k8s.io/klog/v2"

	"nvdra.local/test/simnode/internal/cri"
	"nvdra.local/test/simnode/internal/node"
	"nvdra.local/test/simnode/nodeconfig"
)

func containerInit(args []string) error {
	if len(args) != 1 {
		return errors.New("want the path of an init spec")
	}
	return cri.RunInit(args[0])
}

func runNode(args []string) error {
	fs := flag.NewFlagSet("node", flag.ExitOnError)
	configPath := fs.String("config", "", "node.json written by simnode up/run")
	klogFlags := flag.NewFlagSet("klog", flag.ExitOnError)
	klog.InitFlags(klogFlags)
	_ = fs.Parse(args)
	cfg, err := nodeconfig.LoadConfig(*configPath)
	if err != nil {
		return err
	}
	_ = klogFlags.Set("v", strconv.Itoa(cfg.Verbosity))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	ctx = klog.NewContext(ctx, klog.Background().WithValues("node", cfg.Name))
	if err := node.Run(ctx, cfg, node.Options{SimSysfs: os.Getenv(nodeconfig.EnvSimSysfs)}); err != nil {
		return err
	}
	os.Exit(0)
	return nil
}
