// Command lab-exec runs a program that knows nothing of the lab (Prometheus) so that it
// dies with the lab: when lab-exec's standard input reaches end of file (its parent
// closed it or died), or it gets SIGTERM or SIGINT, it sends SIGTERM to the program and,
// if that has not exited after --grace, SIGKILL. It exits with the program's status.
//
//	lab-exec [--grace 10s] -- PROGRAM ARGS...
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"syscall"
	"time"
)

func main() {
	// Pdeathsig follows the thread that started the program: keep that thread alive.
	runtime.LockOSThread()
	grace := flag.Duration("grace", 10*time.Second, "time between SIGTERM and SIGKILL")
	flag.Parse()
	args := flag.Args()
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: lab-exec [--grace 10s] -- PROGRAM ARGS...")
		os.Exit(2)
	}

	cmd := exec.Command(args[0], args[1:]...)
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	// The program gets no stdin: ours is the lab's lifeline.
	cmd.Stdin = nil
	// If lab-exec itself is killed outright, the kernel still stops the program.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		fmt.Fprintf(os.Stderr, "lab-exec: %v\n", err)
		os.Exit(1)
	}

	stop := make(chan struct{}, 3)
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		stop <- struct{}{}
	}()
	signals := make(chan os.Signal, 2)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		<-signals
		stop <- struct{}{}
	}()

	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	var err error
	select {
	case err = <-exited:
	case <-stop:
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err = <-exited:
		case <-time.After(*grace):
			_ = cmd.Process.Kill()
			err = <-exited
		}
	}
	var exitErr *exec.ExitError
	switch {
	case err == nil:
		os.Exit(0)
	case errors.As(err, &exitErr) && exitErr.ExitCode() >= 0:
		os.Exit(exitErr.ExitCode())
	default:
		os.Exit(1)
	}
}
