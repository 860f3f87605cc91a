"""The key sets of the upstream Helm charts ``gpuready values`` writes values for: facts, not code.

Each set is every key path of the chart's ``values.yaml`` at the named tag (dotted; a map whose keys are user data,
such as ``nodeSelector`` with ``kubernetes.io/os``, is one path and its contents are free), carried over from the
repository, path and commit named beside it. Only the key names are recorded: no chart is vendored and no default
value is copied. A test checks every key path :mod:`gpuready.deploy.helm_values` writes against these sets, so a
key that the named chart version does not have is a failing test, not a value Helm silently ignores.

How they were taken (2026-11-27, from the repositories' git tags): ``yaml.safe_load`` of ``git show
<tag>:<path>``, every mapping key recorded with its path, descending into every non-empty mapping except those whose
keys contain '.' or '/' (label and annotation maps). To refresh for a new chart version, do the same at the new tag,
replace the set and its tag/commit, and update ``docs/helm-values.md``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ChartKeys:
    """One chart version's values.yaml key set, with where it was read."""

    chart: str  # the chart's name, as `helm install RELEASE REPO/<chart>` takes it
    version: str  # the chart version (`helm install --version`)
    helm_repo: str  # the Helm repository the chart is published in
    source: str  # github.com/<repo>/blob/<tag>/<path>
    commit: str  # the commit of that tag
    keys: frozenset[str]

    def open_paths(self) -> frozenset[str]:
        """Recorded paths no other recorded path extends: their contents are free (a scalar, a list, a map of user
        data such as ``config.map`` or ``nodeSelector``)."""
        parents = {k.rsplit(".", 1)[0] for k in self.keys if "." in k}
        return frozenset(k for k in self.keys if k not in parents)

    def unknown(self, path: tuple[str, ...]) -> str | None:
        """The first prefix of ``path`` that the chart does not have (dotted), or None when the chart takes it:
        every prefix down to a recorded open path must be recorded; below an open path anything goes."""
        open_paths = self.open_paths()
        for i in range(1, len(path) + 1):
            prefix = ".".join(path[:i])
            if prefix not in self.keys:
                return prefix
            if prefix in open_paths:
                return None
        return None


def _keys(text: str) -> frozenset[str]:
    return frozenset(text.split())


# nvidia-device-plugin v0.20.0: github.com/NVIDIA/k8s-device-plugin/blob/v0.20.0/deployments/helm/nvidia-device-plugin/values.yaml (commit 1b826acc6af3079d8923bac395c3124b8861a9a6).
# nfd.enabled is not in values.yaml: it is the condition of the chart's node-feature-discovery dependency
# in Chart.yaml (`condition: nfd.enabled,gfd.enabled`) at the same tag, so the chart reads it.
DEVICE_PLUGIN = ChartKeys(
    chart="nvidia-device-plugin",
    version="0.20.0",
    helm_repo="https://nvidia.github.io/k8s-device-plugin",
    source="github.com/NVIDIA/k8s-device-plugin/blob/v0.20.0/deployments/helm/nvidia-device-plugin/values.yaml",
    commit="1b826acc6af3079d8923bac395c3124b8861a9a6",
    keys=_keys(
        """
        config config.name config.map config.default config.fallbackStrategies compatWithCPUManager
        migStrategy failOnInitError deviceListStrategy deviceIDStrategy nvidiaDriverRoot gdrcopyEnabled
        gdsEnabled mofedEnabled deviceDiscoveryStrategy nameOverride fullnameOverride namespaceOverride
        selectorLabelsOverride allowDefaultNamespace imagePullSecrets image image.repository
        image.pullPolicy image.tag updateStrategy updateStrategy.type podAnnotations podSecurityContext
        securityContext resources nodeSelector affinity affinity.nodeAffinity
        affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution
        affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms tolerations
        priorityClassName runtimeClassName devicePlugin devicePlugin.enabled gfd gfd.enabled
        gfd.nameOverride gfd.namespaceOverride gfd.noTimestamp gfd.sleepInterval gfd.securityContext
        gfd.securityContext.privileged nfd nfd.nameOverride nfd.master nfd.master.serviceAccount
        nfd.master.serviceAccount.name nfd.master.serviceAccount.create nfd.master.config
        nfd.master.config.extraLabelNs nfd.worker nfd.worker.tolerations nfd.worker.config
        nfd.worker.config.sources nfd.worker.config.sources.pci
        nfd.worker.config.sources.pci.deviceClassWhitelist nfd.worker.config.sources.pci.deviceLabelFields
        mps mps.root mps.enableHostPID cdi cdi.nvidiaHookPath cdi.featureFlags
        nfd.enabled
        """
    ),
)

# dcgm-exporter 4.8.2: github.com/NVIDIA/dcgm-exporter/blob/4.5.3-4.8.2/deployment/values.yaml (commit 691c92762eb551313c825f6efe4ceeee20982801).
DCGM_EXPORTER = ChartKeys(
    chart="dcgm-exporter",
    version="4.8.2",
    helm_repo="https://nvidia.github.io/dcgm-exporter/helm-charts",
    source="github.com/NVIDIA/dcgm-exporter/blob/4.5.3-4.8.2/deployment/values.yaml",
    commit="691c92762eb551313c825f6efe4ceeee20982801",
    keys=_keys(
        """
        image image.repository image.pullPolicy image.tag arguments imagePullSecrets nameOverride
        fullnameOverride namespaceOverride hostPID runtimeClassName priorityClassName hostNetwork
        serviceAccount serviceAccount.create serviceAccount.annotations serviceAccount.name rollingUpdate
        rollingUpdate.maxUnavailable rollingUpdate.maxSurge podLabels podAnnotations podSecurityContext
        securityContext securityContext.runAsNonRoot securityContext.runAsUser securityContext.capabilities
        securityContext.capabilities.add securityContext.capabilities.drop
        securityContext.allowPrivilegeEscalation service service.enable service.type
        service.internalTrafficPolicy service.clusterIP service.port service.address service.annotations
        resources resources.limits resources.limits.cpu resources.limits.memory resources.requests
        resources.requests.cpu resources.requests.memory serviceMonitor serviceMonitor.apiVersion
        serviceMonitor.enabled serviceMonitor.interval serviceMonitor.scrapeTimeout
        serviceMonitor.honorLabels serviceMonitor.additionalLabels serviceMonitor.relabelings
        serviceMonitor.metricRelabelings nodeSelector tolerations affinity extraHostVolumes
        extraConfigMapVolumes extraVolumeMounts extraEnv kubeletPath tlsServerConfig tlsServerConfig.enabled
        tlsServerConfig.autoGenerated tlsServerConfig.existingSecret tlsServerConfig.certFilename
        tlsServerConfig.keyFilename tlsServerConfig.caFilename tlsServerConfig.clientAuthType
        tlsServerConfig.key tlsServerConfig.cert tlsServerConfig.ca basicAuth basicAuth.users kubernetes
        kubernetes.enablePodLabels kubernetes.enablePodUID kubernetes.podLabelAllowlistRegex kubernetes.rbac
        kubernetes.rbac.create debugDump debugDump.enabled debugDump.directory debugDump.retention
        debugDump.compression kubernetesDRA kubernetesDRA.enabled livenessProbe
        livenessProbe.initialDelaySeconds livenessProbe.periodSeconds readinessProbe
        readinessProbe.initialDelaySeconds
        """
    ),
)

# gpu-operator v26.7.0: github.com/NVIDIA/gpu-operator/blob/v26.7.0/deployments/gpu-operator/values.yaml (commit 10ee5b3638b89e11e949412aafa5ba99279c3721).
GPU_OPERATOR = ChartKeys(
    chart="gpu-operator",
    version="v26.7.0",
    helm_repo="https://helm.ngc.nvidia.com/nvidia",
    source="github.com/NVIDIA/gpu-operator/blob/v26.7.0/deployments/gpu-operator/values.yaml",
    commit="10ee5b3638b89e11e949412aafa5ba99279c3721",
    keys=_keys(
        """
        platform platform.openshift nfd nfd.enabled nfd.nodefeaturerules psa psa.enabled cdi cdi.enabled
        cdi.nriPluginEnabled sandboxWorkloads sandboxWorkloads.enabled sandboxWorkloads.defaultWorkload
        sandboxWorkloads.mode hostPaths hostPaths.rootFS hostPaths.driverInstallDir daemonsets
        daemonsets.labels daemonsets.annotations daemonsets.priorityClassName daemonsets.tolerations
        daemonsets.updateStrategy daemonsets.rollingUpdate daemonsets.rollingUpdate.maxUnavailable validator
        validator.repository validator.image validator.imagePullPolicy validator.imagePullSecrets
        validator.env validator.args validator.resources validator.hostNetwork validator.plugin
        validator.plugin.env operator operator.repository operator.image operator.imagePullPolicy
        operator.imagePullSecrets operator.env operator.priorityClassName operator.runtimeClass
        operator.nodeSelector operator.use_ocp_driver_toolkit operator.cleanupCRD operator.upgradeCRD
        operator.tolerations operator.annotations operator.affinity operator.affinity.nodeAffinity
        operator.affinity.nodeAffinity.preferredDuringSchedulingIgnoredDuringExecution operator.logging
        operator.logging.timeEncoding operator.logging.level operator.logging.develMode operator.resources
        operator.resources.limits operator.resources.limits.cpu operator.resources.limits.memory
        operator.resources.requests operator.resources.requests.cpu operator.resources.requests.memory mig
        mig.strategy driver driver.enabled driver.nvidiaDriverCRD driver.nvidiaDriverCRD.enabled
        driver.nvidiaDriverCRD.deployDefaultCR driver.nvidiaDriverCRD.driverType
        driver.nvidiaDriverCRD.nodeSelector driver.kernelModuleType driver.usePrecompiled driver.repository
        driver.image driver.version driver.imagePullPolicy driver.imagePullSecrets driver.startupProbe
        driver.startupProbe.initialDelaySeconds driver.startupProbe.periodSeconds
        driver.startupProbe.timeoutSeconds driver.startupProbe.failureThreshold driver.rdma
        driver.rdma.enabled driver.rdma.useHostMofed driver.upgradePolicy driver.upgradePolicy.autoUpgrade
        driver.upgradePolicy.maxParallelUpgrades driver.upgradePolicy.maxUnavailable
        driver.upgradePolicy.waitForCompletion driver.upgradePolicy.waitForCompletion.timeoutSeconds
        driver.upgradePolicy.waitForCompletion.podSelector driver.upgradePolicy.gpuPodDeletion
        driver.upgradePolicy.gpuPodDeletion.force driver.upgradePolicy.gpuPodDeletion.timeoutSeconds
        driver.upgradePolicy.gpuPodDeletion.deleteEmptyDir driver.upgradePolicy.drain
        driver.upgradePolicy.drain.enable driver.upgradePolicy.drain.force
        driver.upgradePolicy.drain.podSelector driver.upgradePolicy.drain.timeoutSeconds
        driver.upgradePolicy.drain.deleteEmptyDir driver.manager driver.manager.repository
        driver.manager.image driver.manager.version driver.manager.imagePullPolicy driver.manager.env
        driver.env driver.resources driver.repoConfig driver.repoConfig.configMapName driver.certConfig
        driver.certConfig.name driver.licensingConfig driver.licensingConfig.secretName
        driver.licensingConfig.nlsEnabled driver.virtualTopology driver.virtualTopology.config
        driver.kernelModuleConfig driver.kernelModuleConfig.name driver.secretEnv driver.hostNetwork toolkit
        toolkit.enabled toolkit.repository toolkit.image toolkit.version toolkit.imagePullPolicy
        toolkit.imagePullSecrets toolkit.env toolkit.resources toolkit.installDir toolkit.hostNetwork
        devicePlugin devicePlugin.enabled devicePlugin.repository devicePlugin.image devicePlugin.version
        devicePlugin.imagePullPolicy devicePlugin.imagePullSecrets devicePlugin.args devicePlugin.env
        devicePlugin.resources devicePlugin.config devicePlugin.config.create devicePlugin.config.name
        devicePlugin.config.default devicePlugin.config.data devicePlugin.mps devicePlugin.mps.root
        devicePlugin.hostNetwork dcgm dcgm.enabled dcgm.repository dcgm.image dcgm.version
        dcgm.imagePullPolicy dcgm.args dcgm.env dcgm.resources dcgm.hostNetwork dcgmExporter
        dcgmExporter.enabled dcgmExporter.annotations dcgmExporter.repository dcgmExporter.image
        dcgmExporter.version dcgmExporter.imagePullPolicy dcgmExporter.env dcgmExporter.resources
        dcgmExporter.hostPID dcgmExporter.hostNetwork dcgmExporter.enablePodLabels dcgmExporter.enablePodUID
        dcgmExporter.service dcgmExporter.service.internalTrafficPolicy dcgmExporter.serviceMonitor
        dcgmExporter.serviceMonitor.enabled dcgmExporter.serviceMonitor.interval
        dcgmExporter.serviceMonitor.scrapeTimeout dcgmExporter.serviceMonitor.honorLabels
        dcgmExporter.serviceMonitor.additionalLabels dcgmExporter.serviceMonitor.relabelings gfd gfd.enabled
        gfd.repository gfd.image gfd.version gfd.imagePullPolicy gfd.imagePullSecrets gfd.env gfd.resources
        gfd.hostNetwork migManager migManager.enabled migManager.repository migManager.image
        migManager.version migManager.imagePullPolicy migManager.imagePullSecrets migManager.env
        migManager.resources migManager.config migManager.config.default migManager.config.create
        migManager.config.name migManager.config.data migManager.gpuClientsConfig
        migManager.gpuClientsConfig.name migManager.hostNetwork nodeStatusExporter
        nodeStatusExporter.enabled nodeStatusExporter.repository nodeStatusExporter.image
        nodeStatusExporter.imagePullPolicy nodeStatusExporter.imagePullSecrets nodeStatusExporter.resources
        nodeStatusExporter.hostNetwork gds gds.enabled gds.repository gds.image gds.version
        gds.imagePullPolicy gds.imagePullSecrets gds.env gds.args gdrcopy gdrcopy.enabled gdrcopy.repository
        gdrcopy.image gdrcopy.version gdrcopy.imagePullPolicy gdrcopy.imagePullSecrets gdrcopy.env
        gdrcopy.args vgpuManager vgpuManager.enabled vgpuManager.repository vgpuManager.image
        vgpuManager.version vgpuManager.imagePullPolicy vgpuManager.imagePullSecrets vgpuManager.env
        vgpuManager.resources vgpuManager.driverManager vgpuManager.driverManager.repository
        vgpuManager.driverManager.image vgpuManager.driverManager.version
        vgpuManager.driverManager.imagePullPolicy vgpuManager.driverManager.env
        vgpuManager.kernelModuleConfig vgpuManager.kernelModuleConfig.name vgpuManager.hostNetwork
        vgpuDeviceManager vgpuDeviceManager.enabled vgpuDeviceManager.repository vgpuDeviceManager.image
        vgpuDeviceManager.version vgpuDeviceManager.imagePullPolicy vgpuDeviceManager.imagePullSecrets
        vgpuDeviceManager.env vgpuDeviceManager.config vgpuDeviceManager.config.name
        vgpuDeviceManager.config.default vgpuDeviceManager.hostNetwork vfioManager vfioManager.enabled
        vfioManager.repository vfioManager.image vfioManager.version vfioManager.imagePullPolicy
        vfioManager.imagePullSecrets vfioManager.env vfioManager.resources vfioManager.driverManager
        vfioManager.driverManager.repository vfioManager.driverManager.image
        vfioManager.driverManager.version vfioManager.driverManager.imagePullPolicy
        vfioManager.driverManager.env vfioManager.hostNetwork kataManager kataManager.enabled
        kataManager.config kataManager.imagePullPolicy kataManager.imagePullSecrets kataManager.env
        kataManager.resources kataManager.hostNetwork sandboxDevicePlugin sandboxDevicePlugin.enabled
        sandboxDevicePlugin.repository sandboxDevicePlugin.image sandboxDevicePlugin.version
        sandboxDevicePlugin.imagePullPolicy sandboxDevicePlugin.imagePullSecrets sandboxDevicePlugin.args
        sandboxDevicePlugin.env sandboxDevicePlugin.resources sandboxDevicePlugin.hostNetwork
        kataSandboxDevicePlugin kataSandboxDevicePlugin.enabled kataSandboxDevicePlugin.repository
        kataSandboxDevicePlugin.image kataSandboxDevicePlugin.version
        kataSandboxDevicePlugin.imagePullPolicy kataSandboxDevicePlugin.imagePullSecrets
        kataSandboxDevicePlugin.args kataSandboxDevicePlugin.env kataSandboxDevicePlugin.resources
        kataSandboxDevicePlugin.hostNetwork ccManager ccManager.enabled ccManager.defaultMode
        ccManager.repository ccManager.image ccManager.version ccManager.imagePullPolicy
        ccManager.imagePullSecrets ccManager.resources ccManager.hostNetwork clusterPolicy
        clusterPolicy.deployCR gpuCluster gpuCluster.deployCR draDriver draDriver.repository draDriver.image
        draDriver.version draDriver.imagePullPolicy draDriver.imagePullSecrets draDriver.featureGates
        draDriver.gpus draDriver.gpus.kubeletPlugin draDriver.computeDomains
        draDriver.computeDomains.enabled draDriver.computeDomains.controller
        draDriver.computeDomains.kubeletPlugin extraObjects node-feature-discovery
        node-feature-discovery.priorityClassName node-feature-discovery.gc node-feature-discovery.gc.enable
        node-feature-discovery.gc.replicaCount node-feature-discovery.gc.serviceAccount
        node-feature-discovery.gc.serviceAccount.name node-feature-discovery.gc.serviceAccount.create
        node-feature-discovery.worker node-feature-discovery.worker.serviceAccount
        node-feature-discovery.worker.serviceAccount.name
        node-feature-discovery.worker.serviceAccount.create node-feature-discovery.worker.tolerations
        node-feature-discovery.worker.config node-feature-discovery.worker.config.sources
        node-feature-discovery.worker.config.sources.pci
        node-feature-discovery.worker.config.sources.pci.deviceClassWhitelist
        node-feature-discovery.worker.config.sources.pci.deviceLabelFields node-feature-discovery.master
        node-feature-discovery.master.serviceAccount node-feature-discovery.master.serviceAccount.name
        node-feature-discovery.master.serviceAccount.create node-feature-discovery.master.config
        node-feature-discovery.master.config.extraLabelNs
        """
    ),
)

CHARTS: dict[str, ChartKeys] = {c.chart: c for c in (DEVICE_PLUGIN, DCGM_EXPORTER, GPU_OPERATOR)}
