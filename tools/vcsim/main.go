// vgpu-vcsim: govmomi's vSphere API simulator (vcsim) serving one ESXi 8 host with AMD Instinct GPUs.
//
// It is the real SOAP server of govmomi's simulator package (Debian: golang-github-vmware-govmomi-dev),
// extended where that version does not simulate what vgpu uses (docs/esxi.md, "The simulator"):
//
//   - HostPciPassthruSystem (configManager.pciPassthruSystem): pciPassthruInfo and UpdatePassthruConfig,
//     with applyNow, and hosts that activate a change only at the next reboot;
//   - hardware.pciDevice and config.pciPassthruInfo of the host, from the device list of the spec;
//   - EnvironmentBrowser.QueryConfigTarget().pciPassthrough: the devices whose passthrough is active;
//   - ReconfigVM_Task as ESXi behaves: extraConfig keys are updated in place and removed by an empty
//     value (the stock simulator appends duplicates), a passthrough device cannot be added to or removed
//     from a powered-on VM, its backing must name an active device and this host's systemId;
//   - PowerOnVM_Task refuses a VM whose 64-bit MMIO window cannot hold its GPUs' BARs, or whose memory is
//     not fully reserved, with ESXi's own message;
//   - Dynamic DirectPath I/O (VirtualPCIPassthroughDynamicBackingInfo): a device whose backing names only
//     allowed vendor/device ids; power-on assigns a free active device that matches (assignedId), power-off
//     releases it;
//   - ConfigSpec.changeVersion as ESXi checks it: a reconfigure naming another version than the VM's
//     config.changeVersion fails with ConcurrentAccess; each reconfigure gives the VM a new version;
//   - VMs with a virtual disk (an installed guest: its firmware must not be switched under it);
//   - fault injection for tests: a reconfigure that fails for named VMs, a session that ends while a
//     reconfigure task runs (the next call is NotAuthenticated), NoPermission (SecurityError, with the
//     privilege id) on a named method.
//
// Usage: vgpu-vcsim -spec FILE [-listen 127.0.0.1:0] [-tls -cert-out FILE]
// It prints one JSON line on stdout ({"url": ..., "thumbprint": ...}) once it serves, and exits when
// stdin closes or on SIGTERM. POST /vgpu/reboot (the test's stand-in for rebooting the host) activates
// the passthrough changes a reboot would and powers every VM off.
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"io/ioutil"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/simulator/esx"
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// Device is one PCI function of the host, as the spec describes it.
type Device struct {
	ID           string `json:"id"` // "0000:05:00.0"
	Vendor       int    `json:"vendor"`
	Device       int    `json:"device"`
	SubVendor    int    `json:"sub_vendor"`
	SubDevice    int    `json:"sub_device"`
	Class        int    `json:"class"` // 24-bit class code, e.g. 0x120000
	VendorName   string `json:"vendor_name"`
	DeviceName   string `json:"device_name"`
	ParentBridge string `json:"parent_bridge"`
	Capable      bool   `json:"capable"`
	Enabled      bool   `json:"enabled"`
	Active       bool   `json:"active"`
	Bar64Bytes   int64  `json:"bar64_bytes"` // the sum of its 64-bit BARs (the API does not report BARs)
	Numa         *int   `json:"numa_node"`
}

// VM is one virtual machine registered on the host.
type VM struct {
	Name     string `json:"name"`
	MemoryMB int32  `json:"memory_mb"`
	CPUs     int32  `json:"cpus"`
	PowerOn  bool   `json:"powered_on"`
	Firmware string `json:"firmware"`
	DiskMB   int64  `json:"disk_mb"` // > 0: the VM has a virtual disk of that size (an installed guest)
}

// Spec is the whole simulated host.
type Spec struct {
	Name            string   `json:"name"`
	SystemID        string   `json:"system_id"`
	APIVersion      string   `json:"api_version"`
	Maintenance     bool     `json:"maintenance"`
	RebootToApply   bool     `json:"reboot_to_apply"` // an older host: passthrough changes activate at reboot
	User            string   `json:"user"`
	Password        string   `json:"password"`
	Devices         []Device `json:"devices"`
	VMs             []VM     `json:"vms"`
	FailReconfigure []string `json:"fail_reconfigure"`
	// ExpireSession: the VMs whose (first) reconfigure ends the caller's session once its task was created
	ExpireSession []string `json:"expire_session_on_reconfigure"`
	// Deny: method name (UpdatePassthruConfig, ReconfigVM_Task) -> the privilege id NoPermission names
	Deny map[string]string `json:"deny"`
	// VCenterAPIVersion: serve the service content of a vCenter of that version (about), the host keeping its own
	// config.product (APIVersion): an ESXi 7 host behind a vCenter 8
	VCenterAPIVersion string   `json:"vcenter_api_version"`
	HangReconfigure   []string `json:"hang_reconfigure"` // VMs whose reconfigure task stays running for ever
	ConnectionState   string   `json:"connection_state"` // the host's runtime.connectionState (default connected)
}

type state struct {
	mu      sync.Mutex
	spec    Spec
	host    *simulator.HostSystem
	pts     *PassthruSystem
	version int64 // the last config.changeVersion handed out
}

// nextVersion is a fresh config.changeVersion (ESXi uses a timestamp; any new string will do).
func (s *state) nextVersion() string {
	s.version++
	return fmt.Sprintf("2026-12-04T00:00:00.%06dZ", s.version)
}

// denied is the NoPermission fault for a method the spec denies, or nil.
func denied(method string, obj types.ManagedObjectReference) types.BaseMethodFault {
	sim.mu.Lock()
	defer sim.mu.Unlock()
	if priv, ok := sim.spec.Deny[method]; ok {
		return &types.NoPermission{Object: obj, PrivilegeId: priv}
	}
	return nil
}

var sim state

func (s *state) device(id string) *Device {
	for i := range s.spec.Devices {
		if s.spec.Devices[i].ID == id {
			return &s.spec.Devices[i]
		}
	}
	return nil
}

func pciDevice(d *Device) types.HostPciDevice {
	parts := strings.FieldsFunc(d.ID, func(r rune) bool { return r == ':' || r == '.' })
	num := func(i int) byte {
		v, _ := strconv.ParseUint(parts[i], 16, 8)
		return byte(v)
	}
	return types.HostPciDevice{
		Id: d.ID, ClassId: int16(uint16(d.Class >> 8)), Bus: num(1), Slot: num(2), Function: num(3),
		VendorId: int16(uint16(d.Vendor)), SubVendorId: int16(uint16(d.SubVendor)), VendorName: d.VendorName,
		DeviceId: int16(uint16(d.Device)), SubDeviceId: int16(uint16(d.SubDevice)),
		ParentBridge: d.ParentBridge, DeviceName: d.DeviceName,
	}
}

func (s *state) infos() []types.BaseHostPciPassthruInfo {
	var out []types.BaseHostPciPassthruInfo
	for i := range s.spec.Devices {
		d := &s.spec.Devices[i]
		out = append(out, &types.HostPciPassthruInfo{
			Id: d.ID, DependentDevice: d.ID, PassthruEnabled: d.Enabled, PassthruCapable: d.Capable,
			PassthruActive: d.Active,
		})
	}
	return out
}

// publish copies the device state into the host's and the passthrough system's properties. Inside a
// method of the passthrough system the simulator holds that object's lock already (it is not reentrant).
func (s *state) publish(ptsLocked bool) {
	infos := s.infos()
	simulator.Map.WithLock(s.host, func() { s.host.Config.PciPassthruInfo = infos })
	if ptsLocked {
		s.pts.PciPassthruInfo = infos
	} else {
		simulator.Map.WithLock(s.pts, func() { s.pts.PciPassthruInfo = infos })
	}
}

// PassthruSystem is HostPciPassthruSystem, which the stock simulator lacks.
type PassthruSystem struct {
	mo.HostPciPassthruSystem
}

func (p *PassthruSystem) UpdatePassthruConfig(req *types.UpdatePassthruConfig) soap.HasFault {
	body := &methods.UpdatePassthruConfigBody{}
	if f := denied("UpdatePassthruConfig", p.Self); f != nil {
		body.Fault_ = simulator.Fault("", f)
		return body
	}
	sim.mu.Lock()
	defer sim.mu.Unlock()
	for _, c := range req.Config {
		cfg, ok := c.(*types.HostPciPassthruConfig)
		if !ok {
			body.Fault_ = simulator.Fault("unsupported passthrough config type", &types.InvalidArgument{})
			return body
		}
		d := sim.device(cfg.Id)
		if d == nil {
			body.Fault_ = simulator.Fault("no PCI device "+cfg.Id, &types.InvalidArgument{InvalidProperty: "id"})
			return body
		}
		if cfg.PassthruEnabled && !d.Capable {
			body.Fault_ = simulator.Fault("device "+cfg.Id+" is not passthrough capable", &types.HostConfigFault{})
			return body
		}
	}
	for _, c := range req.Config {
		cfg := c.(*types.HostPciPassthruConfig)
		d := sim.device(cfg.Id)
		d.Enabled = cfg.PassthruEnabled
		applyNow := cfg.ApplyNow != nil && *cfg.ApplyNow
		if applyNow && !sim.spec.RebootToApply {
			d.Active = d.Enabled
		}
	}
	sim.publish(true)
	body.Res = &types.UpdatePassthruConfigResponse{}
	return body
}

func (p *PassthruSystem) Refresh(req *types.Refresh) soap.HasFault {
	return &methods.RefreshBody{Res: &types.RefreshResponse{}}
}

// Browser adds pciPassthrough to QueryConfigTarget.
type Browser struct {
	simulator.EnvironmentBrowser
}

func (b *Browser) QueryConfigTarget(ctx *simulator.Context, req *types.QueryConfigTarget) soap.HasFault {
	res := b.EnvironmentBrowser.QueryConfigTarget(ctx, req)
	body, ok := res.(*methods.QueryConfigTargetBody)
	if !ok || body.Res == nil {
		return res
	}
	sim.mu.Lock()
	defer sim.mu.Unlock()
	for i := range sim.spec.Devices {
		d := &sim.spec.Devices[i]
		if !d.Active {
			continue
		}
		body.Res.Returnval.PciPassthrough = append(body.Res.Returnval.PciPassthrough,
			&types.VirtualMachinePciPassthroughInfo{
				VirtualMachineTargetInfo: types.VirtualMachineTargetInfo{Name: d.DeviceName},
				PciDevice:                pciDevice(d),
				SystemId:                 sim.spec.SystemID,
			})
	}
	return body
}

// PassthruVM is a VirtualMachine that behaves as ESXi does around DirectPath I/O.
type PassthruVM struct {
	simulator.VirtualMachine
}

func isPassthrough(d types.BaseVirtualDevice) bool {
	_, ok := d.(*types.VirtualPCIPassthrough)
	return ok
}

func fault(msg string) types.BaseMethodFault {
	return &types.GenericVmConfigFault{Reason: msg}
}

func (vm *PassthruVM) checkReconfigure(spec *types.VirtualMachineConfigSpec) types.BaseMethodFault {
	sim.mu.Lock()
	defer sim.mu.Unlock()
	for _, name := range sim.spec.FailReconfigure {
		if name == vm.Name {
			return fault("injected fault: reconfiguring " + vm.Name + " failed")
		}
	}
	for _, change := range spec.DeviceChange {
		dc := change.GetVirtualDeviceConfigSpec()
		if !isPassthrough(dc.Device) {
			continue
		}
		if vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOff {
			return &types.InvalidPowerState{RequestedState: types.VirtualMachinePowerStatePoweredOff,
				ExistingState: vm.Runtime.PowerState}
		}
		if dc.Operation != types.VirtualDeviceConfigSpecOperationAdd {
			continue
		}
		if dyn, ok := dc.Device.GetVirtualDevice().Backing.(*types.VirtualPCIPassthroughDynamicBackingInfo); ok {
			if len(dyn.AllowedDevice) == 0 {
				return fault("a Dynamic DirectPath I/O device needs at least one allowed device")
			}
			continue
		}
		backing, ok := dc.Device.GetVirtualDevice().Backing.(*types.VirtualPCIPassthroughDeviceBackingInfo)
		if !ok {
			return fault("a PCI passthrough device needs a device or dynamic backing")
		}
		d := sim.device(backing.Id)
		if d == nil || !d.Active {
			return fault("PCI device " + backing.Id + " is not available for passthrough")
		}
		if backing.SystemId != sim.spec.SystemID {
			return fault("PCI device " + backing.Id + ": systemId " + backing.SystemId + " is not this host's")
		}
		if backing.DeviceId != fmt.Sprintf("%x", uint16(d.Device)) || int(uint16(backing.VendorId)) != d.Vendor {
			return fault("PCI device " + backing.Id + ": vendorId/deviceId do not match the device")
		}
	}
	return nil
}

// mergeExtraConfig applies extraConfig as ESXi does: set in place, an empty value removes the key.
func (vm *PassthruVM) mergeExtraConfig(changes []types.BaseOptionValue) {
	for _, c := range changes {
		v := c.GetOptionValue()
		value := fmt.Sprint(v.Value)
		kept := vm.Config.ExtraConfig[:0]
		found := false
		for _, e := range vm.Config.ExtraConfig {
			ev := e.GetOptionValue()
			if ev.Key != v.Key {
				kept = append(kept, e)
				continue
			}
			found = true
			if value != "" {
				kept = append(kept, &types.OptionValue{Key: v.Key, Value: value})
			}
		}
		vm.Config.ExtraConfig = kept
		if !found && value != "" {
			vm.Config.ExtraConfig = append(vm.Config.ExtraConfig, &types.OptionValue{Key: v.Key, Value: value})
		}
	}
}

func (vm *PassthruVM) ReconfigVMTask(ctx *simulator.Context, req *types.ReconfigVM_Task) soap.HasFault {
	if f := denied("ReconfigVM_Task", vm.Self); f != nil {
		return &methods.ReconfigVM_TaskBody{Fault_: simulator.Fault("", f)}
	}
	if hangs(vm.Name) {
		task := simulator.CreateTask(vm, "reconfigVm", nil)
		simulator.Map.Update(task, []types.PropertyChange{{Name: "info.state", Val: types.TaskInfoStateRunning}})
		return &methods.ReconfigVM_TaskBody{Res: &types.ReconfigVM_TaskResponse{Returnval: task.Self}}
	}
	task := simulator.CreateTask(vm, "reconfigVm", func(t *simulator.Task) (types.AnyType, types.BaseMethodFault) {
		if req.Spec.ChangeVersion != "" && req.Spec.ChangeVersion != vm.Config.ChangeVersion {
			return nil, &types.ConcurrentAccess{}
		}
		if f := vm.checkReconfigure(&req.Spec); f != nil {
			return nil, f
		}
		spec := req.Spec
		spec.ChangeVersion = ""
		extra := spec.ExtraConfig
		spec.ExtraConfig = nil
		res := vm.VirtualMachine.ReconfigVMTask(ctx, &types.ReconfigVM_Task{This: req.This, Spec: spec})
		inner := simulator.Map.Get(res.(*methods.ReconfigVM_TaskBody).Res.Returnval).(*simulator.Task)
		if inner.Info.Error != nil {
			return nil, inner.Info.Error.Fault
		}
		vm.mergeExtraConfig(extra) // the simulator holds this VM's lock during its methods
		sim.mu.Lock()
		vm.Config.ChangeVersion = sim.nextVersion()
		sim.mu.Unlock()
		return nil, nil
	})
	ref := task.Run()
	if expireOnce(vm.Name) {
		// the session ends while the task is known to the caller only by its reference
		other := &simulator.Context{Session: &simulator.Session{UserSession: types.UserSession{Key: "vgpu-vcsim"}}}
		simulator.Map.SessionManager().TerminateSession(other, &types.TerminateSession{SessionId: []string{ctx.Session.Key}})
	}
	return &methods.ReconfigVM_TaskBody{Res: &types.ReconfigVM_TaskResponse{Returnval: ref}}
}

// hangs says whether a reconfigure of the VM is a task that never ends (it changes nothing).
func hangs(name string) bool {
	sim.mu.Lock()
	defer sim.mu.Unlock()
	for _, n := range sim.spec.HangReconfigure {
		if n == name {
			return true
		}
	}
	return false
}

// expireOnce says whether this reconfigure of the VM ends the caller's session (once per VM).
func expireOnce(name string) bool {
	sim.mu.Lock()
	defer sim.mu.Unlock()
	for i, n := range sim.spec.ExpireSession {
		if n == name {
			sim.spec.ExpireSession = append(sim.spec.ExpireSession[:i:i], sim.spec.ExpireSession[i+1:]...)
			return true
		}
	}
	return false
}

func (vm *PassthruVM) extra(key string) string {
	for _, e := range vm.Config.ExtraConfig {
		if v := e.GetOptionValue(); v.Key == key {
			return fmt.Sprint(v.Value)
		}
	}
	return ""
}

// runningHolder names another powered-on VM whose configuration has the PCI device, or "".
func runningHolder(self *PassthruVM, id string) string {
	for _, e := range simulator.Map.All("VirtualMachine") {
		other, ok := e.(*PassthruVM)
		if !ok || other.Self == self.Self || other.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn {
			continue
		}
		for _, dev := range other.Config.Hardware.Device {
			if p, ok := dev.(*types.VirtualPCIPassthrough); ok {
				if b, ok := p.Backing.(*types.VirtualPCIPassthroughDeviceBackingInfo); ok && b.Id == id {
					return other.Name
				}
				if b, ok := p.Backing.(*types.VirtualPCIPassthroughDynamicBackingInfo); ok && b.AssignedId == id {
					return other.Name
				}
			}
		}
	}
	return ""
}

// assignDynamic gives a Dynamic DirectPath I/O device a free active device its allowed ids match (power-on).
func assignDynamic(vm *PassthruVM, b *types.VirtualPCIPassthroughDynamicBackingInfo, taken map[string]bool) (*Device, types.BaseMethodFault) {
	for i := range sim.spec.Devices {
		d := &sim.spec.Devices[i]
		if !d.Active || taken[d.ID] {
			continue
		}
		for _, a := range b.AllowedDevice {
			if int(uint16(a.VendorId)) == d.Vendor && int(uint16(a.DeviceId)) == d.Device {
				if runningHolder(vm, d.ID) == "" {
					b.AssignedId = d.ID
					taken[d.ID] = true
					return d, nil
				}
			}
		}
	}
	return nil, fault("Module 'DevicePowerOn' power on failed. (no free device for Dynamic DirectPath I/O)")
}

// powerOnFault is what ESXi says when a VM with passthrough devices cannot start.
func (vm *PassthruVM) powerOnFault() types.BaseMethodFault {
	var bars int64
	var n int
	taken := map[string]bool{}
	for _, dev := range vm.Config.Hardware.Device {
		p, ok := dev.(*types.VirtualPCIPassthrough)
		if !ok {
			continue
		}
		if dyn, ok := p.Backing.(*types.VirtualPCIPassthroughDynamicBackingInfo); ok {
			sim.mu.Lock()
			d, f := assignDynamic(vm, dyn, taken)
			sim.mu.Unlock()
			if f != nil {
				return f
			}
			bars += d.Bar64Bytes
			n++
			continue
		}
		b, ok := p.Backing.(*types.VirtualPCIPassthroughDeviceBackingInfo)
		if !ok {
			continue
		}
		sim.mu.Lock()
		d := sim.device(b.Id)
		if d == nil || !d.Active {
			sim.mu.Unlock()
			return fault("Module 'DevicePowerOn' power on failed. (PCI device " + b.Id + " is not available)")
		}
		bars += d.Bar64Bytes
		sim.mu.Unlock()
		if other := runningHolder(vm, b.Id); other != "" {
			return fault("Module 'DevicePowerOn' power on failed. (PCI device " + b.Id + " is in use by " + other + ")")
		}
		n++
	}
	if n == 0 {
		return nil
	}
	if vm.Config.MemoryReservationLockedToMax == nil || !*vm.Config.MemoryReservationLockedToMax {
		return fault("Invalid memory setting: memory reservation (sched.mem.min) should be equal to memsize")
	}
	window := int64(0)
	if strings.EqualFold(vm.extra("pciPassthru.use64bitMMIO"), "TRUE") {
		gb, _ := strconv.ParseInt(vm.extra("pciPassthru.64bitMMIOSizeGB"), 10, 64)
		window = gb << 30
	}
	if bars > 0 && window < bars {
		return fault("Module 'DevicePowerOn' power on failed.")
	}
	if vm.Config.Firmware != "efi" && bars >= 4<<30 {
		return fault("Module 'DevicePowerOn' power on failed. (BIOS firmware cannot map 64-bit BARs)")
	}
	return nil
}

func (vm *PassthruVM) PowerOnVMTask(ctx *simulator.Context, req *types.PowerOnVM_Task) soap.HasFault {
	if f := vm.powerOnFault(); f != nil {
		task := simulator.CreateTask(vm, "powerOn", func(*simulator.Task) (types.AnyType, types.BaseMethodFault) {
			return nil, f
		})
		return &methods.PowerOnVM_TaskBody{Res: &types.PowerOnVM_TaskResponse{Returnval: task.Run()}}
	}
	return vm.VirtualMachine.PowerOnVMTask(ctx, req)
}

// releaseDynamic forgets the devices Dynamic DirectPath I/O assigned at power-on.
func (vm *PassthruVM) releaseDynamic() {
	for _, dev := range vm.Config.Hardware.Device {
		if p, ok := dev.(*types.VirtualPCIPassthrough); ok {
			if b, ok := p.Backing.(*types.VirtualPCIPassthroughDynamicBackingInfo); ok {
				b.AssignedId = ""
			}
		}
	}
}

func (vm *PassthruVM) PowerOffVMTask(ctx *simulator.Context, req *types.PowerOffVM_Task) soap.HasFault {
	vm.releaseDynamic()
	return vm.VirtualMachine.PowerOffVMTask(ctx, req)
}

// about is an AboutInfo of the product and API version ("8.0.3.0": version 8.0.3).
func about(base types.AboutInfo, apiVersion, product, apiType string) types.AboutInfo {
	parts := strings.Split(apiVersion, ".")
	base.ApiVersion = apiVersion
	base.Version = strings.Join(parts[:3], ".")
	base.FullName = product + " " + base.Version + " build-24022510 (vgpu-vcsim)"
	base.Name = product
	base.ApiType = apiType
	return base
}

func selfSigned(certOut string) (tls.Certificate, string, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true, IsCA: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, "", err
	}
	if certOut != "" {
		data := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
		if err := ioutil.WriteFile(certOut, data, 0o644); err != nil {
			return tls.Certificate{}, "", err
		}
	}
	sum := sha256.Sum256(der)
	var hexes []string
	for _, b := range sum {
		hexes = append(hexes, fmt.Sprintf("%02X", b))
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, strings.Join(hexes, ":"), nil
}

func createVMs(ctx context.Context, u *url.URL) error {
	c, err := govmomi.NewClient(ctx, u, true)
	if err != nil {
		return err
	}
	defer c.Logout(ctx)
	finder := find.NewFinder(c.Client, false)
	dc, err := finder.DefaultDatacenter(ctx)
	if err != nil {
		return err
	}
	finder.SetDatacenter(dc)
	folders, err := dc.Folders(ctx)
	if err != nil {
		return err
	}
	pool, err := finder.DefaultResourcePool(ctx)
	if err != nil {
		return err
	}
	ds, err := finder.DefaultDatastore(ctx)
	if err != nil {
		return err
	}
	for _, v := range sim.spec.VMs {
		cpus := v.CPUs
		if cpus == 0 {
			cpus = 8
		}
		spec := types.VirtualMachineConfigSpec{
			Name: v.Name, GuestId: string(types.VirtualMachineGuestOsIdentifierUbuntu64Guest),
			NumCPUs: cpus, MemoryMB: int64(v.MemoryMB), Firmware: v.Firmware,
			Files: &types.VirtualMachineFileInfo{VmPathName: fmt.Sprintf("[%s]", ds.Name())},
		}
		task, err := folders.VmFolder.CreateVM(ctx, spec, pool, nil)
		if err != nil {
			return err
		}
		info, err := task.WaitForResult(ctx, nil)
		if err != nil {
			return fmt.Errorf("create VM %s: %v", v.Name, err)
		}
		ref := info.Result.(types.ManagedObjectReference)
		vm := simulator.Map.Get(ref).(*simulator.VirtualMachine)
		wrapped := &PassthruVM{*vm}
		wrapped.Config.ChangeVersion = sim.nextVersion()
		simulator.Map.Put(wrapped)
		if v.DiskMB > 0 {
			obj := object.NewVirtualMachine(c.Client, ref)
			devices, err := obj.Device(ctx)
			if err != nil {
				return err
			}
			ide, err := devices.FindIDEController("")
			if err != nil {
				return err
			}
			disk := devices.CreateDisk(ide, ds.Reference(), "")
			disk.CapacityInKB = v.DiskMB * 1024
			if err := obj.AddDevice(ctx, disk); err != nil {
				return fmt.Errorf("disk of VM %s: %v", v.Name, err)
			}
		}
		if v.PowerOn {
			if _, err := object.NewVirtualMachine(c.Client, ref).PowerOn(ctx); err != nil {
				return err
			}
		}
	}
	return nil
}

func main() {
	specPath := flag.String("spec", "", "the host: devices, VMs, credentials (JSON)")
	listen := flag.String("listen", "127.0.0.1:0", "address to serve on")
	useTLS := flag.Bool("tls", false, "serve https with a fresh self-signed certificate")
	certOut := flag.String("cert-out", "", "write that certificate (PEM) here")
	flag.Parse()
	log.SetOutput(os.Stderr)

	data, err := ioutil.ReadFile(*specPath)
	if err != nil {
		log.Fatal(err)
	}
	if err := json.Unmarshal(data, &sim.spec); err != nil {
		log.Fatalf("spec: %v", err)
	}
	if sim.spec.APIVersion == "" {
		sim.spec.APIVersion = "8.0.3.0"
	}
	hostAbout := about(esx.ServiceContent.About, sim.spec.APIVersion, "VMware ESXi", "HostAgent")
	esx.ServiceContent.About = hostAbout

	model := simulator.ESX()
	model.Machine = 0
	if err := model.Create(); err != nil {
		log.Fatal(err)
	}
	defer model.Remove()

	sim.host = simulator.Map.Any("HostSystem").(*simulator.HostSystem)
	if sim.spec.Name != "" {
		sim.host.Name = sim.spec.Name
		sim.host.Summary.Config.Name = sim.spec.Name
	}
	sim.host.Runtime.InMaintenanceMode = sim.spec.Maintenance
	sim.host.Config.Product = hostAbout // the host's own product, whatever the endpoint's about says
	sim.host.Summary.Config.Product = &hostAbout
	if sim.spec.ConnectionState != "" {
		sim.host.Runtime.ConnectionState = types.HostSystemConnectionState(sim.spec.ConnectionState)
		sim.host.Summary.Runtime = &sim.host.Runtime
	}
	var pci []types.HostPciDevice
	for i := range sim.spec.Devices {
		pci = append(pci, pciDevice(&sim.spec.Devices[i]))
	}
	sim.host.Hardware.PciDevice = pci
	nodes := map[int][]string{}
	maxNode := -1
	for _, d := range sim.spec.Devices {
		if d.Numa != nil {
			nodes[*d.Numa] = append(nodes[*d.Numa], d.ID)
			if *d.Numa > maxNode {
				maxNode = *d.Numa
			}
		}
	}
	if maxNode >= 0 {
		numa := &types.HostNumaInfo{Type: "NUMA", NumNodes: int32(maxNode + 1)}
		for n := 0; n <= maxNode; n++ {
			numa.NumaNode = append(numa.NumaNode, types.HostNumaNode{TypeId: byte(n), PciId: nodes[n]})
		}
		sim.host.Hardware.NumaInfo = numa
	}
	sim.pts = &PassthruSystem{}
	sim.pts.Self = types.ManagedObjectReference{Type: "HostPciPassthruSystem", Value: "pciPassthruSystem"}
	simulator.Map.Put(sim.pts)
	ref := sim.pts.Self
	sim.host.ConfigManager.PciPassthruSystem = &ref
	sim.publish(false)

	for _, e := range simulator.Map.All("ComputeResource") {
		cr, ok := e.(*mo.ComputeResource)
		if !ok {
			continue
		}
		if cr.EnvironmentBrowser != nil {
			eb := simulator.Map.Get(*cr.EnvironmentBrowser).(*simulator.EnvironmentBrowser)
			simulator.Map.Put(&Browser{*eb})
		}
	}

	if sim.spec.User != "" {
		model.Service.Listen = &url.URL{User: url.UserPassword(sim.spec.User, sim.spec.Password)}
	}
	thumb := ""
	if *useTLS {
		cert, t, err := selfSigned(*certOut)
		if err != nil {
			log.Fatal(err)
		}
		thumb = t
		model.Service.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	}
	if model.Service.Listen == nil {
		model.Service.Listen = &url.URL{}
	}
	model.Service.Listen.Host = *listen
	model.Service.HandleFunc("/vgpu/reboot", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(w, "POST only", http.StatusMethodNotAllowed)
			return
		}
		sim.mu.Lock()
		for i := range sim.spec.Devices {
			sim.spec.Devices[i].Active = sim.spec.Devices[i].Enabled
		}
		sim.publish(false)
		sim.mu.Unlock()
		for _, e := range simulator.Map.All("VirtualMachine") {
			if vm, ok := e.(*PassthruVM); ok {
				simulator.Map.WithLock(vm, func() {
					vm.releaseDynamic()
					vm.Runtime.PowerState = types.VirtualMachinePowerStatePoweredOff
					vm.Summary.Runtime.PowerState = types.VirtualMachinePowerStatePoweredOff
				})
			}
		}
		_, _ = io.WriteString(w, "rebooted\n")
	})
	server := model.Service.NewServer()
	defer server.Close()

	admin := *server.URL
	if sim.spec.User != "" {
		admin.User = url.UserPassword(sim.spec.User, sim.spec.Password)
	}
	ctx := context.Background()
	if err := createVMs(ctx, &admin); err != nil {
		log.Fatalf("creating VMs: %v", err)
	}
	if sim.spec.VCenterAPIVersion != "" { // after createVMs: govmomi's own client takes other paths for a vCenter
		si := simulator.Map.Get(vim25.ServiceInstance).(*simulator.ServiceInstance)
		si.Content.About = about(hostAbout, sim.spec.VCenterAPIVersion, "VMware vCenter Server", "VirtualCenter")
	}
	public := *server.URL
	public.User = nil
	out, _ := json.Marshal(map[string]string{"url": public.String(), "thumbprint": thumb})
	fmt.Println(string(out))

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		_, _ = io.Copy(ioutil.Discard, os.Stdin)
		stop <- syscall.SIGTERM
	}()
	<-stop
}
