package main

import "errors"

func clusterCommand(verb string, args []string) error { return errors.New("not yet") }
