package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/tuft-go/tuft/internal/cli"
	"github.com/tuft-go/tuft/store/logstore"
)

// cmdStore checks and repairs the embedded store file.
func cmdStore(args []string) error {
	sub, rest, err := verb(args, "check", "repair")
	if err != nil {
		return err
	}
	summary := "Find damage in the embedded store: where it is and what it would cost (exit 1 if the server would refuse to start, or if an end it cut off at a start may have held acknowledged writes)."
	if sub == "repair" {
		summary = "Keep every intact record of the embedded store, move the damaged bytes aside and report what was lost."
	}
	fs := cli.NewFlags("store "+sub, "tuft store "+sub+" [--config FILE | --path FILE]", summary)
	cfgPath := fs.String("config", "", "tuft_config.yaml ($TUFT_CONFIG); the store is its persistence.path")
	path := fs.String("path", "", "the store file (instead of --config)")
	if err := fs.ParseArgs(rest); err != nil {
		return err
	}
	if err := fs.CheckArgs(0, 0); err != nil {
		return err
	}
	if *path == "" {
		cfg, err := loadConfig(*cfgPath)
		if err != nil {
			return err
		}
		if cfg.Persistence.Mode != "embedded" {
			return fmt.Errorf("persistence.mode is %s: check and repair are for the embedded store", cfg.Persistence.Mode)
		}
		*path = cfg.Persistence.Path
	}
	if sub == "check" {
		rep, err := logstore.Check(*path)
		if err != nil {
			return err
		}
		printReport(os.Stdout, rep)
		if rep.Corrupt() {
			return fmt.Errorf("%s is damaged: stop tuft and run `tuft store repair --path %s` (or restore a backup)", *path, *path)
		}
		if rep.Suspect() {
			return fmt.Errorf("%s ends (or ended, before a start cut it off and kept it aside) in writes that are there in full with bad checksums and may have been acknowledged: "+
				"compare the records named above with what clients were told, then remove the kept %s.damaged-*-tail-at-* file(s) to clear this", *path, *path)
		}
		return nil
	}
	rep, err := logstore.Repair(*path)
	if err != nil {
		return err
	}
	printReport(os.Stdout, &rep.Report)
	if rep.DamagedFile == "" {
		fmt.Println("nothing to repair")
		return nil
	}
	fmt.Printf("repaired: kept %d intact frames (%d writes); %d damaged bytes moved to %s\n",
		rep.KeptFrames, rep.KeptRecords, rep.DamagedBytes, rep.DamagedFile)
	fmt.Println("a record whose latest write was in a damaged region is back at its previous value, or gone if it had none")
	return nil
}

func printReport(w io.Writer, r *logstore.Report) {
	fmt.Fprintf(w, "%s: %d bytes, %d intact frames (%d writes, %d marks)\n", r.Path, r.Size, r.Frames, r.Records, r.Marks)
	if r.InUse {
		fmt.Fprintln(w, "note: a running tuft holds the file; its last write may be in progress")
	}
	for _, c := range r.CutTails {
		kind := "an unfinished last write (a crash): nothing acknowledged was in it"
		if !c.Torn {
			kind = "written in full but damaged: it may have held acknowledged writes"
		}
		fmt.Fprintf(w, "cut off at open: offset %d (%d bytes), kept in %s: %s; %s\n", c.Offset, c.Bytes, c.File, c.Reason, kind)
		if len(c.Keys) > 0 {
			fmt.Fprintf(w, "  records it named (their latest write may be lost): %s\n", strings.Join(c.Keys, ", "))
		}
	}
	if len(r.Damage) == 0 {
		fmt.Fprintln(w, "no damage")
		return
	}
	for i, d := range r.Damage {
		kind := "corruption: the store will not open until it is repaired"
		switch {
		case d.TornTail && d.Suspect:
			kind = "the end of the last write, there in full but damaged (a flipped bit or a lost page): cut off and kept aside when the store opens; it may have held acknowledged writes"
		case d.TornTail:
			kind = "an unfinished last write (a crash): cut off and kept aside when the store opens, nothing acknowledged is in it"
		}
		fmt.Fprintf(w, "damage %d: offsets %d-%d (%d bytes): %s; %s\n", i+1, d.Offset, d.End, d.End-d.Offset, d.Reason, kind)
		if len(d.Keys) > 0 {
			fmt.Fprintf(w, "  records it named (their latest write may be lost): %s\n", strings.Join(d.Keys, ", "))
		} else {
			fmt.Fprintln(w, "  the records it held cannot be read")
		}
	}
}
